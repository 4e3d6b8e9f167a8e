r"""Re-derives a finished long study's statistics from its summary.json and rewrites its
report.md, without the run folders (the committed reference run keeps only the summary):

  python tools/refresh_long_report.py --summary=docs/study_cpu_long/summary.json

The per-seed values and losses in summary.json are the data; what is derived from them is
computed again by the current code: the gap's trend with its lack-of-fit test and the change
from each horizon to the next, the factorial's derived effects (K = V on top of Q = K, the
ties' interaction), each sweep's bracketing with the plateau check, and the equivalence
table with Holm's adjustment. report.md beside the summary is rendered again."""

import os

from absl import app
from absl import flags

from sharedbert.lab import seed_stats
from sharedbert.lab import study_long_report
from sharedbert.models.params import load_config_file
from sharedbert.utils import jsonio

FLAGS = flags.FLAGS
flags.DEFINE_string('summary', None, "A long study's summary.json.")
flags.DEFINE_string('preset', 'cpu_long', 'The study preset it was run with.')
flags.mark_flag_as_required('summary')


def _per_seed(effect: dict) -> dict:
  return dict(zip(effect['seeds'], effect['per_seed']))


def refresh(config, summary: dict) -> None:
  """Recomputes, in place, what summary.json derives from its per-seed values."""
  h = summary['horizon']
  h.update(seed_stats.horizon_shape(h['gap']))
  f = summary['factorial']
  effects = f['effects']
  effects.update(seed_stats.derived_effects(effects))
  # Each factorial comparison's per-seed differences, from the effects that hold them.
  steps = str(f['steps'])
  by_variant = {'symmetric': _per_seed(effects['tie_qk']),
                'kv_shared': _per_seed(effects['tie_kv']),
                'single': _per_seed(effects['tie_qkv']),
                'shared': dict(zip(h['gap'][steps]['seeds'], h['gap'][steps]['per_seed']))}
  qk, asym = by_variant['symmetric'], _per_seed(effects['asymmetry'])
  by_variant['pairwise'] = {s: qk[s] + asym[s] for s in qk if s in asym}
  family = {f'{v} - standard @ {steps}': list(d.values()) for v, d in by_variant.items()
            if v in config.long.factorial_variants}
  alone = {f'shared - standard @ {k}': g['per_seed'] for k, g in h['gap'].items()
           if f'shared - standard @ {k}' not in family}
  summary['equivalence'] = seed_stats.equivalence_table(
      family, alone, summary['margin_nats'], summary['alpha'])
  plateau = float(config.long.plateau_nats)
  for e in summary['selection'].values():
    chosen = e['chosen'] or {}
    losses = {}
    for key, loss in e['losses'].items():
      lr, _, init = key.partition('/')
      if init == chosen.get('init', ''):
        losses[float(lr)] = loss if isinstance(loss, float) else float('inf')
    e.update(seed_stats.bracket(losses, chosen.get('lr'), plateau))


def main(argv):
  del argv
  summary = jsonio.read_json(FLAGS.summary)
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  config = load_config_file(os.path.join(root, 'configs', 'study.py'),
                            f'{FLAGS.preset},data=unused')
  refresh(config, summary)
  jsonio.write_json(FLAGS.summary, summary)
  folder = os.path.dirname(os.path.abspath(FLAGS.summary))
  figures = tuple(n for n in (study_long_report.HORIZON_PNG, study_long_report.CURVES_PNG)
                  if os.path.isfile(os.path.join(folder, n)))
  with open(os.path.join(folder, study_long_report.REPORT_FILE), 'w', encoding='utf-8') as f:
    f.write(study_long_report.render(config, summary, figures))
  print(f'rewrote {FLAGS.summary} and its report.md')


if __name__ == '__main__':
  app.run(main)
