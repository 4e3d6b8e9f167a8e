r"""GLUE parity: one Hugging Face BERT checkpoint fine-tuned by sharedbert and by the
transformers reference (tools/hf_glue_reference.py), same data, recipe and seeds.

  python tools/glue_parity.py --encoder=DATA/pretrained/all-MiniLM-L6-v2 \
      --glue_dir=DATA/glue --workdir=W --hf_python=/path/to/venv-with-torch/bin/python \
      [--tasks=mrpc,stsb,cola,sst2 --seeds=3 --seq_len=64 --max_train_examples=1000 \
       --epochs=3 --batch_size=32 --lr=1e-4 --workers=2] \
      [--summary=docs/uptrain_cpu/summary.json]

Steps: `sharedbert convert_hf import` of the encoder into W/encoder; per task,
`sharedbert.main --config=configs/glue.py` into W/sharedbert/<task> and the reference into
W/hf/<task>.json, `--workers` (2) jobs at a time, each on a core of its own; then
W/parity.json and W/parity.md. `--summary` merges the result into a report's summary.json
as `parity`.
Both sides resume: a rerun of the same command trains only what is missing. The agreement
rule (issue 34): |sharedbert mean - reference mean| <= max(1.0 point, the larger std).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
METRIC = {'mrpc': '(F1 + accuracy) / 2', 'stsb': '(Pearson + Spearman) / 2',
          'cola': 'Matthews correlation', 'sst2': 'accuracy'}


def _pinned(core):
  def pin():
    os.sched_setaffinity(0, {core})
  return pin


def run_jobs(jobs, log_dir: str, workers: int = 2) -> None:
  """Runs (name, argv) jobs, `workers` at a time, each pinned to one core; stops at the
  first failure (its log's tail printed)."""
  cores = sorted(os.sched_getaffinity(0))
  running, pending = {}, list(jobs)
  while pending or running:
    while pending and len(running) < workers:
      name, argv = pending.pop(0)
      free = [c for c in cores if c not in {core for _, core, _ in running.values()}]
      core = free[0] if free else cores[0]
      log = open(os.path.join(log_dir, f'{name}.log'), 'w')
      print(f'parity: start {name} on core {core}', flush=True)
      proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                              preexec_fn=_pinned(core))
      running[name] = (proc, core, (log, time.time()))
    time.sleep(2)
    for name, (proc, core, (log, t0)) in list(running.items()):
      if proc.poll() is None:
        continue
      log.close()
      del running[name]
      if proc.returncode:
        tail = open(os.path.join(log_dir, f'{name}.log')).read()[-3000:]
        for p, _, _ in running.values():
          p.terminate()
        raise SystemExit(f'parity: {name} failed (exit {proc.returncode}):\n{tail}')
      print(f'parity: {name} done in {time.time() - t0:.0f}s', flush=True)


def sharedbert_scores(path: str, task: str) -> list[float]:
  results = json.load(open(path))
  # Each seed's record scores its dev split ('validation' for these tasks) at the end.
  return [100 * next(iter(r['dev'].values()))['score']
          for r in results['tasks'][task]['per_seed']]


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--encoder', required=True, help='a Hugging Face BERT folder')
  parser.add_argument('--glue_dir', required=True)
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--hf_python', required=True,
                      help='a python with torch and transformers (the reference)')
  parser.add_argument('--tasks', default='mrpc,stsb,cola,sst2')
  parser.add_argument('--seeds', type=int, default=3)
  parser.add_argument('--seq_len', type=int, default=64)
  parser.add_argument('--max_train_examples', type=int, default=1000)
  parser.add_argument('--epochs', type=int, default=3)
  parser.add_argument('--batch_size', type=int, default=32)
  parser.add_argument('--lr', type=float, default=1e-4)
  parser.add_argument('--workers', type=int, default=2,
                      help='jobs at once, each pinned to one core of those this process may use')
  parser.add_argument('--reference_recipe', default='hf', choices=['hf', 'sharedbert'],
                      help="the reference's schedule and classifier init: transformers' "
                      "defaults, or sharedbert's (tools/hf_glue_reference.py --schedule, "
                      "--classifier_init)")
  parser.add_argument('--summary', default='', help="a summary.json to merge 'parity' into")
  args = parser.parse_args()
  w = os.path.abspath(args.workdir)
  logs = os.path.join(w, 'logs')
  os.makedirs(logs, exist_ok=True)
  os.makedirs(os.path.join(w, 'hf'), exist_ok=True)
  t0 = time.time()
  encoder = os.path.join(w, 'encoder')
  if not os.path.isfile(os.path.join(encoder, 'config.json')):
    run_jobs([('import', [sys.executable, '-m', 'sharedbert.convert.hf', 'import',
                          f'--hf_dir={args.encoder}', f'--workdir={encoder}'])], logs, 1)
  tasks = args.tasks.split(',')
  seeds = ','.join(str(s) for s in range(args.seeds))
  jobs = []
  for task in tasks:
    jobs.append((f'sharedbert_{task}', [
        sys.executable, '-m', 'sharedbert.main', f'--config=configs/glue.py:task={task},'
        f'seeds={args.seeds}', f'--config.init_from={encoder}',
        f'--config.data.glue_dir={args.glue_dir}', f'--config.data.seq_len={args.seq_len}',
        f'--config.data.max_train_examples={args.max_train_examples}',
        f'--config.num_epochs={args.epochs}', f'--config.batch_size={args.batch_size}',
        f'--config.optim.lr={args.lr}', '--config.eval.predict_test=False',
        '--config.ckpt.max_to_keep=0',
        f'--workdir={os.path.join(w, "sharedbert", task)}']))
    jobs.append((f'hf_{task}', [
        args.hf_python, os.path.join(HERE, 'hf_glue_reference.py'),
        f'--model_dir={args.encoder}', f'--glue_dir={args.glue_dir}', f'--task={task}',
        f'--seeds={seeds}', f'--out={os.path.join(w, "hf", task + ".json")}',
        f'--seq_len={args.seq_len}', f'--max_train_examples={args.max_train_examples}',
        f'--epochs={args.epochs}', f'--batch_size={args.batch_size}', f'--lr={args.lr}'] + (
            ['--schedule=sharedbert', '--classifier_init=truncated_normal']
            if args.reference_recipe == 'sharedbert' else [])))
  run_jobs(jobs, logs, args.workers)

  parity = {}
  recipe = {k: getattr(args, k) for k in ('seq_len', 'max_train_examples', 'epochs',
                                          'batch_size', 'lr', 'reference_recipe')}
  for task in tasks:
    ours = sharedbert_scores(os.path.join(w, 'sharedbert', task, 'results.json'), task)
    hf = [100 * r['score']
          for r in json.load(open(os.path.join(w, 'hf', f'{task}.json')))['seeds']]
    entry = {'sharedbert_mean': float(np.mean(ours)),
             'sharedbert_std': float(np.std(ours, ddof=1)),
             'hf_mean': float(np.mean(hf)), 'hf_std': float(np.std(hf, ddof=1)),
             'seeds': args.seeds, 'sharedbert_per_seed': ours, 'hf_per_seed': hf,
             'metric': METRIC[task], 'scale': 'points (x100)', 'recipe': recipe}
    entry['difference'] = entry['sharedbert_mean'] - entry['hf_mean']
    entry['tolerance'] = max(1.0, entry['sharedbert_std'], entry['hf_std'])
    entry['agree'] = bool(abs(entry['difference']) <= entry['tolerance'])
    entry['task'] = task
    # Apart from the transformers-defaults entry of the same task when merged (--summary).
    parity[task if args.reference_recipe == 'hf' else f'{task}_sharedbert_recipe'] = entry
  load = os.getloadavg()[0]
  encoder_name = os.path.basename(os.path.normpath(args.encoder))
  # This invocation's time: a resumed one only collects.
  out = {'parity': parity, 'encoder': encoder_name, 'wall_s': round(time.time() - t0, 1),
         'load_end': round(load, 2)}
  with open(os.path.join(w, 'parity.json'), 'w') as f:
    json.dump(out, f, indent=1)
  text = render(parity, encoder_name)
  open(os.path.join(w, 'parity.md'), 'w').write(text)
  print(text)
  if args.summary:  # Merged per task, so that runs with other recipes add tasks.
    summary = json.load(open(args.summary)) if os.path.isfile(args.summary) else {}
    summary.setdefault('parity', {}).update(parity)
    with open(args.summary, 'w') as f:
      json.dump(summary, f, indent=1)
      f.write('\n')
    path = os.path.join(os.path.dirname(os.path.abspath(args.summary)), 'parity.md')
    open(path, 'w').write(render(summary['parity'], encoder_name))


def render(parity: dict, encoder_name: str) -> str:
  lines = ['# GLUE parity with Hugging Face', '',
           f'`{encoder_name}` fine-tuned by sharedbert (configs/glue.py) and by '
           'tools/hf_glue_reference.py (transformers `BertForSequenceClassification`), the '
           'same recipe, training subset (the first N of one fixed random order) and seeds; '
           'the whole dev set; written by tools/glue_parity.py. Scores in points, mean ± std '
           'over seeds. Agree: |difference| ≤ max(1.0, the larger std).', '',
           '| task | metric | train examples, epochs, batch, lr, seq | seeds | sharedbert '
           '| Hugging Face | difference | agree |', '|---|---|---|---|---|---|---|---|']
  reference = {'hf': "transformers' schedule and classifier init",
               'sharedbert': "sharedbert's schedule and classifier init"}
  for name, e in parity.items():
    r = e['recipe']
    task = e.get('task', name)
    if r.get('reference_recipe', 'hf') != 'hf':
      task += f' ({reference[r["reference_recipe"]]})'
    lines.append(
        f'| {task} | {e["metric"]} | {r["max_train_examples"]}, {r["epochs"]}, '
        f'{r["batch_size"]}, {r["lr"]:g}, {r["seq_len"]} | {e["seeds"]} | '
        f'{e["sharedbert_mean"]:.2f} ± {e["sharedbert_std"]:.2f} | {e["hf_mean"]:.2f} ± '
        f'{e["hf_std"]:.2f} | {e["difference"]:+.2f} | {"yes" if e["agree"] else "**no**"} |')
  lines += ['', 'Per seed (sharedbert / Hugging Face):', '']
  for name, e in parity.items():
    lines.append(f'- {name}: ' + ', '.join(f'{a:.2f} / {b:.2f}' for a, b in
                                          zip(e['sharedbert_per_seed'], e['hf_per_seed'])))
  return '\n'.join(lines) + '\n'


if __name__ == '__main__':
  main()
