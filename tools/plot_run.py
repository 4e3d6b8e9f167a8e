r"""Learning curves of pretraining runs, from their WORKDIR/metrics.jsonl.

  python tools/plot_run.py OUT.png WORKDIR [WORKDIR ...] [--labels=a,b]

Left: the training loss per log interval; right: held-out MLM accuracy, both against
training seconds (the sum of the logged step times, compilation and evaluation excluded),
with the held-out majority-token accuracy (the unigram floor) dashed. Prints the held-out
points as a table.
"""

import argparse
import json
import os


def read_curve(workdir: str):
  """(train [(seconds, step, loss)], held-out [(seconds, step, accuracy, floor)])."""
  train, held_out, seconds, last_step = [], [], 0.0, 0
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    for line in f:
      m = json.loads(line)
      if 'step_time' in m:
        seconds += m['step_time'] * (m['step'] - last_step)
        last_step = m['step']
        train.append((seconds, m['step'], m['loss']))
      if 'eval_mlm_accuracy' in m:
        held_out.append((seconds, m['step'], m['eval_mlm_accuracy'],
                         m.get('eval_majority_accuracy')))
  return train, held_out


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('out')
  parser.add_argument('workdirs', nargs='+')
  parser.add_argument('--labels', default='')
  args = parser.parse_args()
  labels = args.labels.split(',') if args.labels else [os.path.basename(w.rstrip('/'))
                                                         for w in args.workdirs]
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.6))
  for workdir, label in zip(args.workdirs, labels):
    train, held_out = read_curve(workdir)
    ax_loss.plot([s / 60 for s, _, _ in train], [l for _, _, l in train], label=label)
    line, = ax_acc.plot([s / 60 for s, *_ in held_out], [a for _, _, a, _ in held_out],
                        marker='o', label=label)
    floors = [f for *_, f in held_out if f is not None]
    if floors:
      ax_acc.axhline(floors[-1], ls='--', color=line.get_color(), alpha=0.5)
    print(f'{label}: minutes, step, held-out MLM accuracy')
    for s, step, acc, _ in held_out:
      print(f'  {s / 60:6.1f}  {step:6d}  {acc:.4f}')
  ax_loss.set(xlabel='training minutes', ylabel='MLM loss (train)', title='training loss')
  ax_acc.set(xlabel='training minutes', ylabel='accuracy',
             title='held-out MLM accuracy (dashed: majority token)')
  for ax in (ax_loss, ax_acc):
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(args.out, dpi=90)
  print(f'wrote {args.out}')


if __name__ == '__main__':
  main()
