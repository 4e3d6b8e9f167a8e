"""Frozen metrics of the tiny GLUE fine-tuning and the tiny study (issue #14).

The task engine refactor must not change a single figure: this test runs both tiny
pipelines (the configs of tests/test_finetune.py and tests/test_study.py) and compares
every metric they report with tests/fixtures/engine_freeze.json (tolerance 1e-6).
Timings, paths and anything that is not a number are left out.

Regenerate the fixture only when a change of results is intended:

  JAX_PLATFORMS=cpu python tests/test_engine_freeze.py
"""

import json
import math
import os
import re
import sys


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
FIXTURE = os.path.join(HERE, 'fixtures', 'engine_freeze.json')
TOLERANCE = 1e-6
# Wall-clock figures (time_s, setup_s, step_time_mean, ...) differ on every run.
_UNSTABLE = re.compile(r'(time|wall|_s$|eta)')


def flatten(tree, prefix='') -> dict:
  """Every number of a JSON tree by its path, timings left out."""
  out = {}
  if isinstance(tree, dict):
    for k, v in tree.items():
      if not _UNSTABLE.search(str(k)):
        out.update(flatten(v, f'{prefix}/{k}'))
  elif isinstance(tree, (list, tuple)):
    for i, v in enumerate(tree):
      out.update(flatten(v, f'{prefix}/{i}'))
  elif isinstance(tree, (int, float)) and not isinstance(tree, bool):
    out[prefix] = float(tree)
  return out


def run_glue(root, init_from) -> dict:
  """The tiny GLUE run of test_finetune (SST-2 with a cue word, 2 seeds, 2 epochs) from
  the toy study's `standard` pretraining (one pretraining run less to compile)."""
  import test_finetune as tf_
  from sharedbert.tasks import finetune
  sst2 = tf_.sst2_dir.__wrapped__(root)
  c = tf_.tiny_finetune_config('task=sst2,seeds=2', init_from, glue_dir=str(sst2), seq_len=32)
  c.num_epochs = 2
  return flatten(finetune.finetune_and_evaluate(c, str(root / 'ft')))


def run_study(root) -> dict:
  """The toy study of test_study (standard, shared and none; MRPC with robustness and
  cross-domain to STS-B), reduced to one seed and one task: its run records and
  summary.json."""
  import test_study as ts
  from sharedbert.lab import study
  from sharedbert.lab import study_stats
  corpus, glue_dir = ts._write_fixture_data(root)
  config = ts._toy_config(corpus, glue_dir)
  config.seeds = 1
  config.glue.tasks = 'mrpc'  # With robustness and mrpc->stsb; STS-B costs a compile more.
  workdir = str(root / 'study')
  study.run_study(config, workdir)
  rows = list(config.variants) + ['none']
  runs = study_stats.load_runs(workdir, rows, ['mrpc'])
  with open(os.path.join(workdir, 'summary.json')) as f:
    summary = json.load(f)
  summary.pop('pretraining', None)  # Step times.
  return flatten({'runs': runs, 'summary': summary})


def compute(root) -> dict:
  from sharedbert.lab import study
  (root / 'g').mkdir()
  (root / 's').mkdir()
  out = {'study': run_study(root / 's')}
  from sharedbert.lab import study_plan
  out['glue'] = run_glue(root / 'g', study_plan.pretrain_dir(str(root / 's' / 'study'),
                                                             'standard'))
  return out


def _compare(got: dict, want: dict) -> list[str]:
  errors = [f'{k}: missing' for k in sorted(set(want) - set(got))]
  errors += [f'{k}: new' for k in sorted(set(got) - set(want))]
  for k in sorted(set(got) & set(want)):
    a, b = got[k], want[k]
    if not (a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= TOLERANCE):
      errors.append(f'{k}: {a!r} != frozen {b!r}')
  return errors


def test_tiny_glue_and_study_metrics_are_frozen(tmp_path):
  with open(FIXTURE) as f:
    frozen = json.load(f)
  got = compute(tmp_path)
  for part in ('glue', 'study'):
    assert len(frozen[part]) > 50, part  # The fixture holds real figures.
    errors = _compare(got[part], frozen[part])
    assert not errors, f'{part}: {len(errors)} differences:\n' + '\n'.join(errors[:30])


if __name__ == '__main__':
  import pathlib
  import tempfile
  import conftest  # noqa: F401  (the same 8 CPU devices as under pytest)
  with tempfile.TemporaryDirectory() as tmp:
    values = compute(pathlib.Path(tmp))
  with open(FIXTURE, 'w') as f:
    json.dump(values, f, indent=0, sort_keys=True)
    f.write('\n')
  print(f'wrote {FIXTURE}: {len(values["glue"])} + {len(values["study"])} values')
