r"""Why `masa` fails the induction probe: its coefficients' start, tested (issue 54).

  python -m sharedbert.lab.masa_init --out=docs/probe_masa [--seeds=3]

`masa` (the probe's cpu model: 2 layers, 2 atoms per type) is trained on the probe's
`induction` task from each coefficient start of `model.masa_coefficient_init`, with seeds
0..seeds-1, at the probe cpu preset's recipe (1,200 steps of batch 32, Adam at lr 3e-3).
The starts:

  normal      every layer a random mix of every atom (the default): mixed and, by chance,
              possibly ill-conditioned;
  one_hot     layer l on atom l alone: separated and perfectly conditioned;
  orthogonal  every layer a mix of every atom, perfectly conditioned: the control that
              separates the two explanations.

If `orthogonal` fails as `normal` does, conditioning is not the cause and the layers'
coupling through shared atoms is; if it learns as `one_hot` does, the coupling is not the
cause. For every run: its final accuracy, and the condition number of each projection
type's [L, S] coefficient matrix at init and trained. Writes OUT/results.json and
OUT/results.md.
"""

from __future__ import annotations

import os
import time

from absl import app
from absl import flags
import numpy as np

from sharedbert.lab import probe
from sharedbert.models import masa
from sharedbert.models.params import load_config_file
from sharedbert.utils import jsonio

FLAGS = flags.FLAGS
TASK = 'induction'
LR = 3e-3


def config_for(init: str):
  """The probe's cpu preset, reduced to masa on induction with the given start."""
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  config = load_config_file(os.path.join(root, 'configs', 'probe.py'), 'cpu')
  with config.unlocked():
    config.variants = ('masa',)
    config.tasks = (TASK,)
    config.model.masa_coefficient_init = init
  return config


def condition_numbers(params) -> dict[str, float]:
  """{projection type: the 2-norm condition number of its [L, S] coefficients}."""
  dictionary = params['bert']['shared_attention']
  return {t: float(np.linalg.cond(np.asarray(dictionary[t]['coefficients'], np.float64)))
          for t in sorted(dictionary)}


def run(seeds: int) -> dict:
  """Every (start, seed): final accuracy, curve and condition numbers."""
  out = {'task': TASK, 'lr': LR, 'seeds': list(range(seeds)), 'runs': {}}
  for init in masa.COEFFICIENT_INITS:
    config = config_for(init)
    trainer = probe.Trainer(config, 'masa', TASK, LR)
    out['steps'], out['batch_size'] = int(config.total_steps), int(config.batch_size)
    for seed in range(seeds):
      t0 = time.time()
      result = trainer.train(config, TASK, seed, probe.eval_set(config, TASK, seed),
                             keep_params=True)
      params = result.pop('params')
      out['runs'][f'{init}/seed{seed}'] = {
          'init': init, 'seed': seed, 'accuracy': result['curve'][-1]['accuracy'],
          'curve': [[p['step'], p['accuracy']] for p in result['curve']],
          'condition_init': condition_numbers(params['init']),
          'condition_trained': condition_numbers(params['trained']),
          'wall_s': round(time.time() - t0, 1)}
      print(f'masa {init} seed {seed}: accuracy {out["runs"][f"{init}/seed{seed}"]["accuracy"]:.3f}',
            flush=True)
  return out


def render(results: dict) -> str:
  lines = ['# masa on the induction probe, by its coefficients\' start', '',
           f'`masa` (2 layers, 2 atoms a type) on `{results["task"]}` (chance 0.11), '
           f'{results["steps"]:,} steps of batch {results["batch_size"]}, lr {results["lr"]:g}, '
           'each start with the same seeds (the same data and atoms). Condition number: the '
           '2-norm one of each projection type\'s 2×2 coefficient matrix, the largest of the '
           'four (q, k, v, o), at init → trained.', '',
           '| start | seed | final accuracy | condition number, init → trained |',
           '|---|---|---|---|']
  for r in results['runs'].values():
    lines.append(f'| {r["init"]} | {r["seed"]} | {r["accuracy"]:.3f} | '
                 f'{max(r["condition_init"].values()):.2f} → '
                 f'{max(r["condition_trained"].values()):.2f} |')
  return '\n'.join(lines) + '\n'


def main(argv):
  del argv
  t0 = time.time()
  results = run(FLAGS.seeds)
  results['wall_s'] = round(time.time() - t0, 1)
  os.makedirs(FLAGS.out, exist_ok=True)
  jsonio.write_json(os.path.join(FLAGS.out, 'results.json'), results)
  with open(os.path.join(FLAGS.out, 'results.md'), 'w', encoding='utf-8') as f:
    f.write(render(results))
  print(f'wrote {FLAGS.out}/results.md in {results["wall_s"]:.0f}s')


if __name__ == '__main__':
  flags.DEFINE_string('out', None, 'Where results.json and results.md go.')
  flags.DEFINE_integer('seeds', 3, 'Seeds 0..seeds-1 for each start.')
  flags.mark_flag_as_required('out')
  app.run(main)
