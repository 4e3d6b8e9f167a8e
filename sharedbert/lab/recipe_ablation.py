r"""The budget recipe's ablation: held-out MLM accuracy at the same wall time, per change.

    python -m sharedbert.lab.recipe_ablation --workdir=/tmp/recipe_ablation \
        --out=docs/recipe
    python -m sharedbert.lab.recipe_ablation --workdir=W --seconds=240 --preset=tiny \
        --corpus=DATA/corpus --variant=standard

Arms: BERT's recipe, the budget recipe, and the budget recipe without each of its groups
(`sharedbert.config.BUDGET_RECIPE`), all at the preset's size. Every arm gets the same
training time: a short calibration run measures its step time, and its `total_steps` is
set so that the schedule (warmup, then decay to 0) ends when the time is up. Each arm is
one ordinary pretraining run in W/<arm>/ (a finished arm is skipped when the command is run
again; an interrupted one trains again from its start);
the report goes to OUT/recipe.md, OUT/ablation.json and OUT/learning_curves.png.
Step times are machine-dependent: run it on an idle machine and read the load it reports.
"""

from __future__ import annotations

import json
import os
import time

from absl import app
from absl import flags
from absl import logging

from sharedbert import config as sb_config
from sharedbert.errors import UserError, one_line_errors
from sharedbert.utils import reporting
from sharedbert import train

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'Where the arms train (W/<arm>/, W/calibration/<arm>/).')
flags.DEFINE_string('out', 'docs/recipe', 'Where recipe.md, ablation.json and the plot go.')
flags.DEFINE_float('seconds', 240.0, 'Training wall time of every arm, in seconds.')
flags.DEFINE_string('preset', 'tiny', 'The size preset of configs/<variant>_base.py.')
flags.DEFINE_string('variant', 'shared', 'The attention variant.')
flags.DEFINE_string('corpus', '', "The corpus (default: the preset's, the demo corpus).")
flags.DEFINE_list('arms', [], 'Only these arms (default: all), e.g. bert,budget.')
flags.DEFINE_integer('calibration_steps', 30, 'Steps of the step-time calibration run.')
flags.DEFINE_integer('evals', 8, 'Held-out evaluations along each arm (for the curves).')

WITHOUT = 'budget without '


def arms() -> dict[str, dict]:
  """Arm name -> the config overrides that make it (recipe, minus a group)."""
  out = {'bert': sb_config.recipe_overrides('bert'), 'budget': sb_config.recipe_overrides('budget')}
  for group in sb_config.BUDGET_RECIPE:
    out[WITHOUT + group] = sb_config.recipe_overrides('budget', without=(group,))
  return out


def arm_config(arm: str, overrides: dict, preset: str, variant: str, corpus: str):
  """The preset under BERT's recipe, then the arm's overrides (the budget keys it keeps)."""
  arg = f'size={preset},recipe=bert' + (f',corpus={corpus}' if corpus else '')
  config = sb_config.pretrain_config(variant, arg)
  sb_config.apply_overrides(config, {k: v(config) if callable(v) else v
                                     for k, v in overrides.items()})
  return config


def _get(config, dotted: str):
  node = config
  for name in dotted.split('.'):
    node = node[name]
  return node


def _read_metrics(workdir: str) -> list[dict]:
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f if line.strip()]


def _slug(arm: str) -> str:
  return arm.replace(' ', '_').replace('%', 'pct')


def calibrate(config, workdir: str, steps: int) -> float:
  """Seconds per step of `config`, from a short run (after compilation)."""
  c = config.copy_and_resolve_references()
  c.total_steps = steps
  c.log_every_steps = max(steps // 3, 1)
  c.eval_every_steps = steps
  c.eval_batches = 1
  c.ckpt.every_steps = steps
  c.fill_mask_examples = ()
  if not os.path.exists(os.path.join(workdir, 'summary.json')):
    train.train_and_evaluate(c, workdir)
  timed = [m['step_time'] for m in _read_metrics(workdir) if 'step_time' in m]
  # The first interval holds the input pipeline's warm-up: take the later ones.
  return min(timed[1:] or timed)


def run_arm(arm: str, overrides: dict, workdir: str) -> dict:
  config = arm_config(arm, overrides, FLAGS.preset, FLAGS.variant, FLAGS.corpus)
  step_time = calibrate(config, os.path.join(workdir, 'calibration', _slug(arm)),
                        FLAGS.calibration_steps)
  steps = max(int(FLAGS.seconds / step_time), 10)
  config.total_steps = steps
  config.optim.warmup_steps = min(config.optim.warmup_steps, steps // 10)
  config.eval_every_steps = max(steps // FLAGS.evals, 1)
  config.log_every_steps = max(steps // (4 * FLAGS.evals), 1)
  config.ckpt.every_steps = steps
  config.fill_mask_examples = ()
  run_dir = os.path.join(workdir, _slug(arm))
  logging.info('arm %r: %.3f s/step calibrated -> %d steps for %.0f s', arm, step_time, steps,
               FLAGS.seconds)
  start = time.time()
  if not os.path.exists(os.path.join(run_dir, 'summary.json')):
    train.train_and_evaluate(config, run_dir)
  metrics = _read_metrics(run_dir)
  # The learning curve against training time: the summed step times up to each evaluation.
  clock, curve = 0.0, []
  for m in metrics:
    if 'step_time' in m:
      clock += m['step_time'] * config.log_every_steps
    if 'eval_mlm_accuracy' in m:
      curve.append((m['step'], round(clock, 1), m['eval_mlm_accuracy']))
  final = [m for m in metrics if 'eval_mlm_accuracy' in m][-1]
  resolved = {k: _get(config, k) for k in overrides}  # As applied to this preset.
  return {'arm': arm, 'overrides': resolved, 'steps': steps,
          'calibrated_step_time': round(step_time, 4), 'train_seconds': round(clock, 1),
          'wall_seconds_this_call': round(time.time() - start, 1),
          'eval_mlm_accuracy': final['eval_mlm_accuracy'],
          'eval_majority_accuracy': final['eval_majority_accuracy'],
          'eval_masked_tokens': final.get('eval_masked_tokens'), 'eval_loss': final['eval_loss'],
          'curve': curve}


def sitting_load(workdir: str) -> str:
  """The load average when this workdir's first arm started (kept in W/load_before.txt),
  so that a report regenerated later still says how busy the machine was while it trained."""
  path = os.path.join(workdir, 'load_before.txt')
  if not os.path.exists(path):
    os.makedirs(workdir, exist_ok=True)
    with open(path, 'w') as f:
      f.write(', '.join(f'{x:.2f}' for x in os.getloadavg()))
  with open(path) as f:
    return f.read().strip()


def write_report(results: list[dict], out: str, command: str, load: str):
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, 'ablation.json'), 'w') as f:
    json.dump({'command': command, 'load_average_before': load, 'seconds': FLAGS.seconds,
               'preset': FLAGS.preset, 'variant': FLAGS.variant,
               'corpus': FLAGS.corpus or 'demo', 'arms': results}, f, indent=2)
  budget = next((r for r in results if r['arm'] == 'budget'), None)
  lines = [
      '# The budget recipe: ablation', '',
      f'Held-out MLM accuracy after **{FLAGS.seconds:.0f} s of training** per arm '
      f'(`{FLAGS.variant}` attention, preset `{FLAGS.preset}`, corpus '
      f'`{FLAGS.corpus or "demo"}`), one sitting on one machine (load average before: {load}). '
      'Each arm is BERT\'s recipe plus the listed keys; its steps are its budget divided by '
      'its calibrated step time, so every schedule ends at the budget.', '',
      'Regenerate:', '', f'    {command}', '',
      f'The steps come from a {FLAGS.calibration_steps}-step calibration, which is noisy: the '
      '*training s* column '
      '(the summed step times the run logged) says how long each arm really trained.', '',
      '| arm | steps | s/step | training s | held-out MLM acc. | Δ vs budget | floor | '
      'masked tokens | loss |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|']
  for r in results:
    delta = (f'{r["eval_mlm_accuracy"] - budget["eval_mlm_accuracy"]:+.3f}'
             if budget and r is not budget else '')
    lines.append(f'| {r["arm"]} | {r["steps"]} | {r["calibrated_step_time"]:.3f} | '
                 f'{r["train_seconds"]:.0f} | {r["eval_mlm_accuracy"]:.3f} | {delta} | '
                 f'{r["eval_majority_accuracy"]:.3f} | '
                 f'{r["eval_masked_tokens"]} | {r["eval_loss"]:.3f} |')
  lines += ['', 'The budget recipe\'s keys (`sharedbert/config/__init__.py`, `BUDGET_RECIPE`):', '']
  budget_values = (budget or results[0])['overrides'] if results else {}
  for group, keys in sb_config.BUDGET_RECIPE.items():
    lines.append(f'- {group}: ' + ', '.join(f'`{k}={budget_values.get(k, v)}`' for k, v in keys.items()))
  lines += ['', '![learning curves](learning_curves.png)', '']
  with open(os.path.join(out, 'recipe.md'), 'w') as f:
    f.write('\n'.join(lines))
  plt = reporting.pyplot()
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for r in results:
    if r['curve']:
      ax.plot([c[1] for c in r['curve']], [c[2] for c in r['curve']], marker='.', label=r['arm'])
  if results:
    ax.axhline(results[0]['eval_majority_accuracy'], color='grey', ls=':', label='floor')
  ax.set_xlabel('training seconds')
  ax.set_ylabel('held-out MLM accuracy')
  ax.legend(fontsize=7)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  reporting.save_figure(fig, os.path.join(out, 'learning_curves.png'), dpi=110)


def main(argv):
  with one_line_errors('sharedbert recipe_ablation', trains=True):
    if not FLAGS.workdir:
      raise UserError('--workdir is required')
    if FLAGS.seconds <= 0:
      raise UserError(f'--seconds must be positive, got {FLAGS.seconds}')
    all_arms = arms()
    chosen = FLAGS.arms or list(all_arms)
    unknown = [a for a in chosen if a not in all_arms]
    if unknown:
      raise UserError(f'unknown arms {unknown}; known: {", ".join(all_arms)}')
    load = sitting_load(FLAGS.workdir)
    shown = [f'--{name}={FLAGS[name].value}' for name in ('out', 'seconds', 'preset', 'variant',
                                                        'corpus') if FLAGS[name].present]
    if FLAGS['arms'].present:  # Quoted: arm names have spaces.
      shown.append(f'"--arms={",".join(chosen)}"')
    command = ' '.join(['python -m sharedbert.lab.recipe_ablation --workdir=W'] + shown)
    results = []
    for arm in chosen:
      results.append(run_arm(arm, all_arms[arm], FLAGS.workdir))
      write_report(results, FLAGS.out, command, load)  # After each arm: nothing lost.
      logging.info('arm %r: held-out MLM accuracy %.4f', arm, results[-1]['eval_mlm_accuracy'])


if __name__ == '__main__':
  from sharedbert import cli
  app.run(main, flags_parser=cli.flags_parser('sharedbert recipe_ablation',
                                              'sharedbert.lab.recipe_ablation'))
