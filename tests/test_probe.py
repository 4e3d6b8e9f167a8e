"""Attention probes: the task generators' labels, the config knobs, and the command end to end."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from sharedbert.experiments import probe
from sharedbert.experiments import probe_report
from sharedbert.experiments import probe_tasks as pt
from sharedbert.errors import UserError
from sharedbert.models.params import load_config_file

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(preset='cpu'):
  return load_config_file(os.path.join(REPO, 'configs', 'probe.py'), preset)


def _s(*symbols):
  return [pt.NUM_SPECIAL + s for s in symbols]


class _FixedRng:
  """Stands in for np.random.Generator: `random` and `integers` return given arrays."""

  def __init__(self, random=(), integers=()):
    self._random, self._integers = list(random), list(integers)

  def random(self, shape):
    out = np.asarray(self._random.pop(0), np.float64)
    assert out.shape == tuple(shape), (out.shape, shape)
    return out

  def integers(self, low, high=None, size=None):
    out = np.asarray(self._integers.pop(0))
    assert out.shape == tuple(size), (out.shape, size)
    return out


def _order(*ranks):
  """Random draws whose argsort is the given order: `_distinct` takes them in that order."""
  r = np.empty(len(ranks))
  r[list(ranks)] = np.arange(len(ranks)) / len(ranks)
  return r[None, :]


def test_mqar_labels_on_a_hand_made_case():
  cfg = _config()
  cfg.vocab_size, cfg.seq_len = 8, 16
  cfg.mqar.num_pairs, cfg.mqar.num_queries = 3, 2
  # Keys: symbols 2, 0, 3; values 5, 7, 4 (all distinct); queried: pairs 2 then 0.
  rng = _FixedRng(random=[_order(2, 0, 3, 5, 7, 4, 1, 6), _order(2, 0, 1)])
  b = pt.generate('mqar', cfg, rng, 1, 4)
  assert pt.describe(b.input_ids[0]) == 'CLS s2 s5 s0 s7 s3 s4 SEP s3 MASK s2 MASK'
  np.testing.assert_array_equal(b.positions[0], [9, 11, 0, 0])
  np.testing.assert_array_equal(b.labels[0, :2], _s(4, 5))
  np.testing.assert_array_equal(b.weights[0], [1, 1, 0, 0])
  np.testing.assert_array_equal(b.segment_ids[0], [0] * 8 + [1] * 8)
  np.testing.assert_array_equal(b.input_mask[0], [1] * 12 + [0] * 4)


def test_induction_labels_on_a_hand_made_case():
  cfg = _config()
  cfg.vocab_size, cfg.seq_len = 6, 12
  cfg.induction.context_len, cfg.induction.num_queries = 4, 2
  # Context: symbols 4 1 5 0; queries: indices 2 (s5 -> s0) and 0 (s4 -> s1).
  rng = _FixedRng(random=[_order(4, 1, 5, 0, 2, 3), _order(2, 0, 1)])
  b = pt.generate('induction', cfg, rng, 1, 2)
  assert pt.describe(b.input_ids[0]) == 'CLS s4 s1 s5 s0 SEP s5 s4'
  np.testing.assert_array_equal(b.positions[0], [6, 7])
  np.testing.assert_array_equal(b.labels[0], _s(0, 1))


def test_directed_labels_on_a_hand_made_case():
  cfg = _config()
  cfg.vocab_size, cfg.seq_len = 6, 16
  cfg.directed.context_len, cfg.directed.num_queries = 5, 3
  # Context: symbols 3 0 4 1 2; interior indices 1 + (2, 0, 1) = 3, 1, 2;
  # directions BEFORE, AFTER, BEFORE.
  rng = _FixedRng(random=[_order(3, 0, 4, 1, 2, 5), _order(2, 0, 1)],
                  integers=[[[1, 0, 1]]])
  b = pt.generate('directed', cfg, rng, 1, 3)
  assert pt.describe(b.input_ids[0]) == 'CLS s3 s0 s4 s1 s2 SEP BEFORE s1 AFTER s0 BEFORE s4'
  np.testing.assert_array_equal(b.positions[0], [8, 10, 12])
  # BEFORE s1 -> s4; AFTER s0 -> s4; BEFORE s4 -> s0: s4 answers both directions.
  np.testing.assert_array_equal(b.labels[0], _s(4, 4, 0))
  np.testing.assert_array_equal(b.kinds[0], [1, 0, 1])


def test_majority_labels_and_margin():
  cfg = _config()
  cfg.majority.length, cfg.majority.num_symbols, cfg.majority.margin = 9, 3, 2
  b = pt.generate('majority', cfg, np.random.default_rng(0), 200, 2)
  symbols = b.input_ids[:, 1:10] - pt.NUM_SPECIAL
  for row, label in zip(symbols, b.labels[:, 0] - pt.NUM_SPECIAL):
    counts = np.bincount(row, minlength=3)
    assert counts[label] == counts.max()
    assert counts[label] - np.sort(counts)[-2] >= 2
  np.testing.assert_array_equal(b.positions[:, 0], 0)  # read at CLS
  np.testing.assert_array_equal(b.weights, [[1, 0]] * 200)
  # A hand-made row: symbols 1 1 0 2 1 -> 1.
  cfg.majority.length, cfg.majority.margin = 5, 1
  rng = _FixedRng(integers=[np.array([[1, 1, 0, 2, 1], [0, 1, 2, 0, 1]] * 2)])
  b = pt.generate('majority', cfg, rng, 1, 1)
  assert pt.describe(b.input_ids[0]) == 'CLS s1 s1 s0 s2 s1'
  assert b.labels[0, 0] == _s(1)[0]


@pytest.mark.parametrize('task', pt.TASKS)
def test_random_batches_are_consistent(task):
  """Every label follows from the input, for many random rows."""
  cfg = _config()
  b = pt.generate(task, cfg, np.random.default_rng(1), 64, probe.num_slots(cfg))
  for i in range(64):
    ids = b.input_ids[i]
    sep = list(ids).index(pt.SEP) if task != 'majority' else None
    for pos, label, w, kind in zip(b.positions[i], b.labels[i], b.weights[i], b.kinds[i]):
      if not w:
        continue
      if task == 'mqar':
        assert ids[pos] == pt.MASK
        k = list(ids[:sep]).index(ids[pos - 1])
        assert k % 2 == 1 and ids[k + 1] == label
      elif task == 'induction':
        assert ids[list(ids[:sep]).index(ids[pos]) + 1] == label
      elif task == 'directed':
        step = -1 if ids[pos - 1] == pt.BEFORE else 1
        assert kind == (step == -1)
        assert ids[list(ids[:sep]).index(ids[pos]) + step] == label
      elif task == 'cyclic':
        # Brute force: walk round the cycle from the query to the next shown symbol.
        shown = [int(x) - pt.NUM_SPECIAL for x in ids[1:sep]]
        query = int(ids[pos]) - pt.NUM_SPECIAL
        assert len(set(shown)) == 3 and query in shown and b.segment_ids[i, pos] == 1
        y = (query + 1) % cfg.vocab_size
        while y not in shown:
          y = (y + 1) % cfg.vocab_size
        assert label == pt.symbol(y)


def test_difficulty_knobs_are_config_keys_that_change_the_data():
  base = _config()
  def data(**changes):
    cfg = _config()
    for key, value in changes.items():
      node = cfg
      *path, last = key.split('.')
      for p in path:
        node = node[p]
      node[last] = value
    probe.validate(cfg)
    task = next(iter(changes)).split('.')[0]
    task = task if task in pt.TASKS else 'mqar'
    return probe.eval_set(cfg, task, 0), cfg
  ref, _ = data(**{'mqar.num_pairs': base.mqar.num_pairs})
  more_pairs, _ = data(**{'mqar.num_pairs': base.mqar.num_pairs + 2})
  assert (more_pairs['input_mask'].sum(1) == ref['input_mask'].sum(1) + 4).all()
  longer, cfg = data(seq_len=base.seq_len + 16)
  assert longer['input_ids'].shape[1] == base.seq_len + 16
  small_vocab, cfg = data(vocab_size=16)
  assert small_vocab['input_ids'].max() < pt.NUM_SPECIAL + 16
  assert probe.model_config(cfg, 'standard').vocab_size == pt.NUM_SPECIAL + 16
  ctx, _ = data(**{'induction.context_len': base.induction.context_len + 3})
  ref_ind = probe.eval_set(base, 'induction', 0)
  assert (list(ctx['input_ids'][0]).index(pt.SEP) ==
          list(ref_ind['input_ids'][0]).index(pt.SEP) + 3)
  maj, _ = data(**{'majority.num_symbols': 2})
  assert set(np.unique(maj['labels'][:, 0])) <= set(_s(0, 1))


def test_bad_knobs_are_user_errors():
  cfg = _config()
  cfg.mqar.num_pairs = cfg.vocab_size  # more keys than the key half of the vocabulary
  with pytest.raises(UserError, match=r'config\.mqar\.num_pairs=.*num_pairs <= vocab_size // 2'):
    probe.validate(cfg)
  cfg = _config()
  cfg.directed.context_len = cfg.seq_len
  with pytest.raises(UserError, match=r'config\.directed\.context_len'):
    probe.validate(cfg)
  cfg = _config()
  cfg.eval_every_steps = 7
  with pytest.raises(UserError, match='eval_every_steps'):
    probe.validate(cfg)
  cfg = _config()
  cfg.variants = ('standard', 'nope')
  with pytest.raises(UserError, match='nope'):
    probe.validate(cfg)


def test_presets_validate():
  for preset in ('cpu', 'gpu'):
    cfg = _config(preset)
    probe.validate(cfg)
    # Every registered variant is probed (issue 31's three included).
    assert set(cfg.variants) >= {'standard', 'shared', 'symmetric', 'pairwise', 'partial_qk',
                                 'masa', 'kv_shared', 'single', 'q_identity'}
    assert len(cfg.tasks) == 4
    # cyclic (selectable) on its own one-layer model; the other tasks on the probe's.
    assert probe.model_config(cfg, 'standard', 'cyclic').num_layers == 1
    assert probe.model_config(cfg, 'standard', 'mqar').num_layers == cfg.model.num_layers


def _symmetric_accuracy(score, n):
  """Accuracy on every (triple, query) of the cyclic task when the query picks, of the
  other two, the one with the higher score[query, y] (a tie counts as wrong)."""
  import itertools
  right = total = 0
  for triple in itertools.combinations(range(n), 3):
    for x in triple:
      a, b = [y for y in triple if y != x]
      if score[x, a] == score[x, b]:
        pick = None
      else:
        pick = a if score[x, a] > score[x, b] else b
      right += pick == pt.cyclic_successor(triple, x, n)
      total += 1
  return right / total


def _cyclic_config():
  cfg = _config()
  cfg.tasks = ('cyclic',)
  return cfg


def test_no_symmetric_score_passes_the_cyclic_ceiling_and_one_reaches_it():
  n = 9
  rng = np.random.default_rng(0)
  for _ in range(50):  # Symmetric M plus a key bias h: never above 2/3.
    m = rng.standard_normal((n, n))
    score = (m + m.T) + rng.standard_normal(n)[None, :]
    assert _symmetric_accuracy(score, n) <= pt.symmetric_ceiling('cyclic') + 1e-12
  x, y = np.meshgrid(np.arange(n), np.arange(n), indexing='ij')
  reaching = np.maximum(x, y) - np.minimum(x, y) / n   # The docstring's construction.
  summary = probe_report._json_ready(probe_report.summarize(_cyclic_config(), {}),
                                     _cyclic_config(), {})
  assert summary['tasks']['cyclic']['symmetric_ceiling'] == pytest.approx(2 / 3)
  assert _symmetric_accuracy(reaching, n) == pytest.approx(2 / 3)
  # A score that is not symmetric answers every query: -(distance ahead).
  ahead = -((y - x) % n).astype(float)
  assert _symmetric_accuracy(ahead, n) == 1.0


def test_paired_difference_is_reliable_only_when_the_interval_excludes_zero():
  a = {'seeds': [0, 1, 2], 'accuracy': [0.9, 0.92, 0.88]}
  b = {'seeds': [0, 1, 2], 'accuracy': [0.5, 0.51, 0.49]}
  d = probe_report.paired_difference(a, b, 0.95)
  assert d['diff'] == pytest.approx(0.4) and d['reliable']
  half = 4.302652729911275 * 0.01 / np.sqrt(3)
  assert d['ci'] == pytest.approx([0.4 - half, 0.4 + half])
  noisy = {'seeds': [0, 1, 2], 'accuracy': [0.9, 0.4, 0.5]}
  assert not probe_report.paired_difference(noisy, b, 0.95)['reliable']


def test_a_reliable_difference_needs_a_minimum_size_and_no_ceiling():
  """Issue 33: partial_qk's -0.001 on induction (1-2 answers of 1,536) had an interval
  excluding 0 and was printed bold."""
  a = {'seeds': [0, 1, 2], 'accuracy': [0.5, 0.51, 0.49]}
  b = {'seeds': [0, 1, 2], 'accuracy': [0.49, 0.5, 0.48]}  # 0.01 higher in every seed.
  assert probe_report.paired_difference(a, b, 0.95)['reliable']  # Without a minimum.
  assert not probe_report.paired_difference(a, b, 0.95, min_difference=0.02)['reliable']
  top = {'seeds': [0, 1, 2], 'accuracy': [1.0, 1.0, 1.0]}
  near = {'seeds': [0, 1, 2], 'accuracy': [0.999, 0.9993, 0.9987]}
  d = probe_report.paired_difference(near, top, 0.95)
  assert d['ceiling'] and not d['reliable'] and d['ci'][1] < 0  # Excludes 0, at the ceiling.
  far = {'seeds': [0, 1, 2], 'accuracy': [0.9, 0.91, 0.89]}
  d = probe_report.paired_difference(far, top, 0.95, min_difference=0.02)
  assert d['reliable'] and not d['ceiling']


def test_one_step_command_writes_a_sane_report(tmp_path):
  workdir = tmp_path / 'probe'
  args = [sys.executable, '-m', 'sharedbert.experiments.probe', f'--workdir={workdir}',
          '--config.variants=("standard","shared")', '--config.seeds=2',
          # Every task, cyclic (not in the preset; its own one-layer model) included.
          '--config.tasks=(' + ','.join(f'"{t}"' for t in pt.TASKS) + ')',
          '--config.total_steps=1', '--config.eval_every_steps=1', '--config.batch_size=4',
          '--config.eval_examples=16', '--config.optim.warmup_steps=0']
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu', CUDA_VISIBLE_DEVICES='')
  proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  summary = json.loads((workdir / 'summary.json').read_text())
  assert set(summary['tasks']) == set(pt.TASKS)
  for task, entry in summary['tasks'].items():
    assert set(entry['variants']) == {'standard', 'shared'}
    for name, v in entry['variants'].items():
      assert v['n'] == 2 and v['seeds'] == [0, 1]
      assert all(0.0 <= a <= 1.0 for a in v['accuracy'])
      assert v['steps'] == [0, 1]
      assert v['mean'] == pytest.approx(np.mean(v['accuracy']))
    assert 'vs_standard' in entry['variants']['shared']
    assert len(entry['variants']['shared']['vs_standard']['per_seed']) == 2
  assert 'by_direction' in summary['tasks']['directed']['variants']['standard']
  p = summary['parameters']
  assert p['shared']['attention'] < p['standard']['attention']
  report = (workdir / 'report.md').read_text()
  assert '## Accuracy' in report and '`shared`' in report and 'mqar' in report
  assert str(tmp_path) not in report  # no machine paths
  assert '--workdir=W' in report
  for png in ('curves.png', 'final.png'):
    assert (workdir / png).read_bytes()[:4] == b'\x89PNG'
  run = workdir / 'runs' / 'shared' / 'mqar' / 'seed_1.json'
  first, mtime = run.read_text(), run.stat().st_mtime_ns
  # A second invocation resumes: nothing is retrained, the report is rewritten.
  proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert run.read_text() == first and run.stat().st_mtime_ns == mtime
  assert json.loads((workdir / 'summary.json').read_text())['tasks'] == summary['tasks']


def test_bad_config_is_one_line_exit_2(tmp_path):
  args = [sys.executable, '-m', 'sharedbert.experiments.probe', f'--workdir={tmp_path / "w"}',
          '--config.mqar.num_pairs=1000']
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')
  proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines()[-1].startswith('sharedbert probe: error: config.mqar')
  assert not (tmp_path / 'w').exists()
