"""Attention probes: the task generators' labels, the config knobs, and the command end to end."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from sharedbert.lab import probe
from sharedbert.lab import probe_report
from sharedbert.lab import probe_tasks as pt
from sharedbert.errors import UserError
from sharedbert.models import attention as attention_lib
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
  cfg.seq_len = 12
  cfg.mqar.num_pairs, cfg.mqar.key_vocab, cfg.mqar.value_vocab = 3, 4, 5
  # Keys: symbols 2, 0, 3; values 4 + (1, 4, 0) (the value symbols follow the keys');
  # queried in the order 2, 0, 1 of the pairs.
  rng = _FixedRng(random=[_order(2, 0, 3, 1), _order(1, 4, 0, 2, 3), _order(2, 0, 1)])
  b = pt.generate('mqar', cfg, rng, 1, 4)
  assert pt.describe(b.input_ids[0]) == 'CLS s2 s5 s0 s8 s3 s4 s3 s2 s0'
  np.testing.assert_array_equal(b.positions[0], [7, 8, 9, 0])   # Read at the keys.
  np.testing.assert_array_equal(b.labels[0, :3], _s(4, 5, 8))
  np.testing.assert_array_equal(b.weights[0], [1, 1, 1, 0])
  np.testing.assert_array_equal(b.segment_ids[0], [0] * 12)
  np.testing.assert_array_equal(b.input_mask[0], [1] * 10 + [0] * 2)


def test_cyclic_labels_on_hand_made_cases():
  cfg = _config()
  cfg.vocab_size = 8
  # Query 6, shown 1 and 7: 7 comes first going round from 6; the nearer is 7 as well.
  b = pt.generate('cyclic', cfg, _FixedRng(random=[_order(6, 1, 7, 0, 2, 3, 4, 5)]), 1, 1)
  assert pt.describe(b.input_ids[0]) == 'CLS s1 s7 SEP s6'
  assert b.positions[0, 0] == 4 and b.labels[0, 0] == 2   # The position of s7.
  # Query 3, shown 1 and 6: successor 6 (3 ahead), nearer 1 (2 behind).
  b = pt.generate('cyclic', cfg, _FixedRng(random=[_order(3, 1, 6, 0, 2, 4, 5, 7)]), 1, 1)
  assert b.labels[0, 0] == 2
  b = pt.generate('cyclic_nearest', cfg,
                  _FixedRng(random=[np.repeat(_order(3, 1, 6, 0, 2, 4, 5, 7), 2, axis=0)]), 1, 1)
  assert pt.describe(b.input_ids[0]) == 'CLS s1 s6 SEP s3'
  assert b.labels[0, 0] == 1
  np.testing.assert_array_equal(b.segment_ids[0], 0)   # One segment: one input map.


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
    sep = list(ids).index(pt.SEP) if task not in ('majority', 'mqar', 'mirror') else None
    for pos, label, w, kind in zip(b.positions[i], b.labels[i], b.weights[i], b.kinds[i]):
      if not w:
        continue
      if task == 'mqar':
        # The key's first occurrence is followed by its value; keys and values disjoint.
        first = list(ids).index(ids[pos])
        assert first < pos and first % 2 == 1 and ids[first + 1] == label
        k = cfg.mqar.key_vocab
        assert ids[pos] < pt.NUM_SPECIAL + k <= label < pt.NUM_SPECIAL + k + cfg.mqar.value_vocab
      elif task == 'induction':
        assert ids[list(ids[:sep]).index(ids[pos]) + 1] == label
      elif task == 'directed':
        step = -1 if ids[pos - 1] == pt.BEFORE else 1
        assert kind == (step == -1)
        assert ids[list(ids[:sep]).index(ids[pos]) + step] == label
      elif task == 'mirror':
        # Three copies of one symbol, equally spaced; the label is the later one.
        copies = [j for j in range(len(ids)) if ids[j] >= pt.NUM_SPECIAL]
        distance = pos - copies[0]
        assert copies == [pos - distance, pos, pos + distance] and label == pos + distance
        assert len(set(ids[copies])) == 1 and 1 <= distance <= cfg.mirror.max_distance
      elif task in pt.POINTER_TASKS:
        # Brute force: walk round the cycle from the query to the first shown symbol (or,
        # for the control, outwards both ways to the nearer one).
        shown = [int(x) - pt.NUM_SPECIAL for x in ids[1:sep]]
        query = int(ids[pos]) - pt.NUM_SPECIAL
        n = cfg.vocab_size
        assert len(set(shown + [query])) == 3 and label in (1, 2)
        for d in range(1, n):
          hits = [y for y in shown if y == (query + d) % n or
                  (task == 'cyclic_nearest' and y == (query - d) % n)]
          if hits:
            assert len(hits) == 1  # The control draws no ties.
            assert int(ids[label]) - pt.NUM_SPECIAL == hits[0]
            break


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
  assert (more_pairs['input_mask'].sum(1) == ref['input_mask'].sum(1) + 6).all()
  wide, cfg = data(**{'mqar.value_vocab': 200})
  assert wide['labels'].max() >= pt.NUM_SPECIAL + base.mqar.key_vocab + 64
  assert (probe.model_config(cfg, 'standard', 'mqar').vocab_size ==
          pt.NUM_SPECIAL + base.mqar.key_vocab + 200)
  longer, cfg = data(seq_len=base.seq_len + 16)
  assert longer['input_ids'].shape[1] == base.seq_len + 16
  _, cfg = data(vocab_size=12)
  assert probe.eval_set(cfg, 'induction', 0)['input_ids'].max() < pt.NUM_SPECIAL + 12
  assert probe.model_config(cfg, 'standard', 'induction').vocab_size == pt.NUM_SPECIAL + 12
  ctx, _ = data(**{'induction.context_len': base.induction.context_len + 3})
  ref_ind = probe.eval_set(base, 'induction', 0)
  assert (list(ctx['input_ids'][0]).index(pt.SEP) ==
          list(ref_ind['input_ids'][0]).index(pt.SEP) + 3)
  maj, _ = data(**{'majority.num_symbols': 2})
  assert set(np.unique(maj['labels'][:, 0])) <= set(_s(0, 1))


def test_bad_knobs_are_user_errors():
  cfg = _config()
  cfg.mqar.num_pairs = cfg.mqar.key_vocab + 1  # more keys than the key vocabulary
  with pytest.raises(UserError, match=r'config\.mqar\.num_pairs=.*min\(key_vocab, value_vocab\)'):
    probe.validate(cfg)
  cfg = _config()
  cfg.mqar.more_pairs = (2, 40)
  with pytest.raises(UserError, match=r'config\.mqar\.more_pairs has 40'):
    probe.validate(cfg)
  cfg = _config()
  cfg.lr_sweep.lrs = (1e-3, 2.0)
  with pytest.raises(UserError, match=r'config\.lr_sweep\.lrs'):
    probe.validate(cfg)
  cfg = _config()
  cfg.induction.context_len = cfg.seq_len
  with pytest.raises(UserError, match=r'config\.induction\.context_len'):
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
  for preset in ('cpu', 'smoke', 'gpu'):
    cfg = _config(preset)
    probe.validate(cfg)
    # Every registered variant is probed, one added later included.
    if preset != 'smoke':
      assert set(cfg.variants) == set(attention_lib.VARIANTS)
    assert {'mqar', 'cyclic', 'cyclic_nearest'} <= set(cfg.tasks)
    # MQAR causal with its own vocabularies; cyclic on one layer without positions.
    assert probe.model_config(cfg, 'standard', 'mqar').causal
    pointer = probe.model_config(cfg, 'standard', 'cyclic')
    assert pointer.num_layers == 1 and pointer.position_embeddings == 'none'
    assert probe.model_config(cfg, 'standard', 'induction').num_layers == cfg.model.num_layers
    # The confounds of issue 33: masa with >= 2 atoms, pairwise's P_h at 1/sqrt(H).
    assert probe.model_config(cfg, 'masa').masa_atoms >= 2
    head = cfg.model.hidden_size // cfg.model.num_heads
    assert cfg.model.pairwise_init_std == pytest.approx(head ** -0.5, rel=1e-3)
  assert probe.task_ids(_config()) == ['mqar', 'mqar_p2', 'mqar_p8', 'cyclic', 'cyclic_nearest',
                                       'induction', 'majority']


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


def test_no_symmetric_score_passes_the_cyclic_bound_and_one_reaches_it():
  n = 9
  rng = np.random.default_rng(0)
  for _ in range(50):  # Symmetric M plus query and key biases: never above 2/3.
    m = rng.standard_normal((n, n))
    score = (m + m.T) + rng.standard_normal(n)[:, None] + rng.standard_normal(n)[None, :]
    assert _symmetric_accuracy(score, n) <= pt.symmetric_bound('cyclic') + 1e-12
  x, y = np.meshgrid(np.arange(n), np.arange(n), indexing='ij')
  reaching = np.maximum(x, y) - np.minimum(x, y) / n   # The docstring's construction.
  assert _symmetric_accuracy(reaching, n) == pytest.approx(2 / 3)
  # A score that is not symmetric answers every query: -(distance ahead).
  ahead = -((y - x) % n).astype(float)
  assert _symmetric_accuracy(ahead, n) == 1.0


def _cyclic_loss_fit(kind, n=7, steps=1500, seed=0):
  """Fits a score to every (triple, query) of the cyclic task by cross-entropy over the two
  shown symbols; returns (loss, accuracy) at the end."""
  import itertools
  import jax
  import jax.numpy as jnp
  import optax
  rows = []
  for triple in itertools.combinations(range(n), 3):
    for x in triple:
      a, b = [y for y in triple if y != x]
      rows.append((x, a, b, int(pt.cyclic_successor(triple, x, n) == b)))
  q, a, b, label = (jnp.asarray(c) for c in zip(*rows))
  key = jax.random.PRNGKey(seed)
  params = {'m': 0.3 * jax.random.normal(key, (n, n)), 'h': jnp.zeros(n), 'g': jnp.zeros(n)}

  def score(p):
    m = p['m'] + p['m'].T if kind == 'symmetric' else p['m']
    return m + p['g'][:, None] + p['h'][None, :]

  def loss_acc(p):
    s = score(p)
    logits = jnp.stack([s[q, a], s[q, b]], axis=1)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, label).mean()
    return loss, jnp.mean(jnp.argmax(logits, axis=1) == label)
  tx = optax.adam(0.05)
  state = tx.init(params)

  @jax.jit
  def step(p, state):
    grads, _ = jax.grad(loss_acc, has_aux=True)(p)
    updates, state = tx.update(grads, state, p)
    return optax.apply_updates(p, updates), state
  for _ in range(steps):
    params, state = step(params, state)
  return tuple(float(x) for x in loss_acc(params))


def test_a_trained_symmetric_score_ends_at_the_cyclic_ceiling_of_one_half():
  """The derivation of probe_tasks' docstring, checked: a symmetric score's margins over a
  triple sum to 0, so cross-entropy is smallest with every margin 0 (chance), whatever the
  start; an unconstrained score learns every query."""
  loss, acc = _cyclic_loss_fit('symmetric')
  assert loss == pytest.approx(np.log(2), abs=1e-4)
  assert acc == pytest.approx(pt.symmetric_ceiling('cyclic'), abs=0.05)
  loss, acc = _cyclic_loss_fit('free')
  assert acc == 1.0 and loss < 0.05
  summary = probe_report._json_ready(probe_report.summarize(_cyclic_config(), {}),
                                     _cyclic_config(), {})
  assert summary['tasks']['cyclic']['symmetric_ceiling'] == 0.5
  assert summary['tasks']['cyclic']['symmetric_bound'] == pytest.approx(2 / 3)


def test_symmetric_scores_flag_matches_the_first_layer_logits():
  """A variant flagged `symmetric_scores` has pointer logits s(x, y) = M_xy + g_x + h_y with
  M symmetric: the antisymmetric part sums to 0 round every triangle. The others do not."""
  import jax
  import jax.numpy as jnp
  from sharedbert.models.bert import BertForPretraining
  cfg = _cyclic_config()
  n = cfg.vocab_size
  # Every content symbol once, after CLS; each position in turn reads the others.
  ids = jnp.asarray([[pt.CLS] + list(pt.symbol(np.arange(n)))], jnp.int32)
  batch = {'input_ids': ids, 'segment_ids': jnp.zeros_like(ids),
           'input_mask': jnp.ones_like(ids),
           'positions': jnp.arange(1, n + 1, dtype=jnp.int32)[None]}
  for variant in attention_lib.VARIANTS:
    model = BertForPretraining(probe.model_config(cfg, variant, 'cyclic'))
    params = model.init(jax.random.PRNGKey(1), ids, batch['segment_ids'], batch['input_mask'],
                        batch['positions'])['params']
    scores = np.asarray(probe.first_layer_scores(model, params, batch))[0, :, 1:]  # [n, n]
    anti = scores - scores.T
    np.fill_diagonal(anti, 0.0)
    cycle = max(abs(anti[a, b] + anti[b, c] + anti[c, a])
                for a in range(n) for b in range(n) for c in range(n)
                if len({a, b, c}) == 3)
    scale = np.abs(anti).max()
    if attention_lib.VARIANTS[variant].symmetric_scores:
      assert cycle < 1e-4 * max(scale, 1.0), variant
    else:
      assert cycle > 1e-3 * max(scale, 1e-6), variant


def test_the_learning_rate_is_chosen_on_seed_0_and_the_plan_waits_for_it():
  cfg = _config('smoke')
  cfg.variants, cfg.tasks, cfg.seeds = ('standard',), ('mqar', 'majority'), 2
  jobs, chosen = probe.plan(cfg, {})
  # Before the sweep: seed 0 at each rate for mqar; majority at optim.lr, every seed.
  assert set(jobs) == {probe.Job('standard', 'mqar', lr, 0) for lr in cfg.lr_sweep.lrs} | {
      probe.Job('standard', 'majority', cfg.optim.lr, s) for s in (0, 1)}
  assert chosen == {('standard', 'majority'): cfg.optim.lr}

  def record(acc, curve):
    return {'accuracy': acc, 'curve': [{'accuracy': a} for a in curve]}
  low, high = cfg.lr_sweep.lrs
  records = {probe.Job('standard', 'mqar', low, 0): record(0.5, [0.1, 0.5]),
             probe.Job('standard', 'mqar', high, 0): record(0.7, [0.1, 0.7])}
  jobs, chosen = probe.plan(cfg, records)
  assert chosen[('standard', 'mqar')] == high
  assert {j for j in jobs if j.task.startswith('mqar') and j.lr == high} == {
      probe.Job('standard', t, high, s) for t in ('mqar', 'mqar_p2') for s in (0, 1)}
  # A tie goes to the higher mean over the curve.
  records[probe.Job('standard', 'mqar', low, 0)] = record(0.7, [0.6, 0.7])
  assert probe.plan(cfg, records)[1][('standard', 'mqar')] == low


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


def test_smoke_preset_writes_a_sane_report_and_resumes(tmp_path):
  workdir = tmp_path / 'probe'
  args = [sys.executable, '-m', 'sharedbert.lab.probe', '--config=configs/probe.py:smoke',
          f'--workdir={workdir}']
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu', CUDA_VISIBLE_DEVICES='')
  proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
  assert proc.returncode == 0, proc.stderr[-3000:]
  cfg = _config('smoke')
  summary = json.loads((workdir / 'summary.json').read_text())
  assert list(summary['tasks']) == probe.task_ids(cfg)
  for task, entry in summary['tasks'].items():
    assert set(entry['by_variant']) == set(cfg.variants)
    for name, v in entry['by_variant'].items():
      assert v['n'] == cfg.seeds and v['seeds'] == list(range(cfg.seeds))
      assert all(0.0 <= a <= 1.0 for a in v['accuracy'])
      assert v['steps'] == list(range(0, cfg.total_steps + 1, cfg.eval_every_steps))
      assert v['mean'] == pytest.approx(np.mean(v['accuracy']))
      assert v['symmetric_scores'] == attention_lib.VARIANTS[name].symmetric_scores
  mqar = summary['tasks']['mqar']
  # Nothing learns in 20 steps: the gate fails and MQAR compares no variant.
  assert mqar['gate_passed'] is False and mqar['gate']['num_pairs'] == cfg.mqar.num_pairs
  assert 'vs_standard' not in mqar['by_variant']['shared']
  assert set(mqar['by_pairs']) == {'2', '4'}
  assert set(mqar['by_variant']['shared']['sweep']) == {f'{lr:g}' for lr in cfg.lr_sweep.lrs}
  cyclic = summary['tasks']['cyclic']
  assert cyclic['symmetric_ceiling'] == 0.5
  assert 'at_symmetric_ceiling' in cyclic['by_variant']['shared']
  assert len(cyclic['by_variant']['shared']['vs_standard']['per_seed']) == cfg.seeds
  p = summary['parameters']
  assert p['shared']['attention'] < p['standard']['attention']
  report = (workdir / 'report.md').read_text()
  for heading in ('## Accuracy', '## Learning rates', '## MQAR by number of pairs',
                  '## Direction: `cyclic` against its ceiling'):
    assert heading in report
  assert 'gate' in report and 'failed' in report
  assert str(tmp_path) not in report  # no machine paths
  assert '--workdir=W' in report
  for png in ('curves.png', 'final.png', 'pairs.png'):
    assert (workdir / png).read_bytes()[:4] == b'\x89PNG'
  run = workdir / 'runs' / 'shared' / 'mqar_p2' / f'lr{mqar["by_variant"]["shared"]["lr"]:g}_seed1.json'
  first, mtime = run.read_text(), run.stat().st_mtime_ns
  # A second invocation resumes: nothing is retrained, the report is rewritten.
  proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert run.read_text() == first and run.stat().st_mtime_ns == mtime
  assert json.loads((workdir / 'summary.json').read_text())['tasks'] == summary['tasks']


def test_bad_config_is_one_line_exit_2(tmp_path):
  args = [sys.executable, '-m', 'sharedbert.lab.probe', f'--workdir={tmp_path / "w"}',
          '--config.mqar.num_pairs=1000']
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')
  proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines()[-1].startswith('sharedbert probe: error: config.mqar')
  assert not (tmp_path / 'w').exists()


def test_mirror_arms_set_the_positions_and_their_ceilings():
  cfg = _config('mirror')
  probe.validate(cfg)
  assert probe.task_ids(cfg) == ['mirror_learned', 'mirror_rotary', 'mirror_phase']
  models = {t: probe.model_config(cfg, 'symmetric', t) for t in probe.task_ids(cfg)}
  assert [(m.position_embeddings, m.rope_query_phase, m.num_layers) for m in models.values()] \
      == [('learned', 0.0, 1), ('rotary', 0.0, 1), ('rotary', cfg.mirror.query_phase, 1)]
  assert [pt.symmetric_ceiling(t, cfg) for t in probe.task_ids(cfg)] == [None, 0.5, 0.5]
  # Under rotary, only Q = K without a phase keeps a symmetric score matrix.
  symmetric = {t: probe_report.symmetric_score_variants(cfg, t) for t in probe.task_ids(cfg)}
  assert {'shared', 'symmetric', 'single'} <= symmetric['mirror_learned']
  assert symmetric['mirror_rotary'] == {'symmetric', 'single'}
  assert symmetric['mirror_phase'] == set()
  # The cpu preset's runs keep their fingerprint: mirror is hashed only when it runs.
  plain = _config()
  without = probe.config_hash(plain)
  plain.mirror.query_phase = 2.0
  assert probe.config_hash(plain) == without


@pytest.mark.parametrize('variant,arm,at_half', [
    ('symmetric', 'rotary', True), ('single', 'rotary', True), ('shared', 'rotary', False),
    ('symmetric', 'phase', False), ('standard', 'rotary', False)])
def test_mirror_ties_a_symmetric_rotary_score_on_every_row(variant, arm, at_half):
  """An untrained Q = K model under rotary positions scores the two copies equally on every
  row, so its accuracy is exactly 1/2 (ties count half); shared's diagonals, a query phase or
  standard's two projections leave almost no row tied."""
  import jax
  cfg = _config('mirror')
  task = f'mirror_{arm}'
  trainer = probe.Trainer(cfg, variant, task)
  state = trainer.init(jax.random.key(0), jax.random.key(1))
  batch = probe.eval_set(cfg, task, 0)
  right, count, _, _ = trainer.evaluate(state.params, batch)
  accuracy = float(right) / float(count)
  scores = np.asarray(probe.first_layer_scores(trainer.model, state.params, batch))[:, 0]
  rows = np.arange(len(scores))
  label = scores[rows, batch['labels'][:, 0]]
  other = scores[rows, 2 * batch['positions'][:, 0] - batch['labels'][:, 0]]
  tied = np.abs(label - other) <= 1e-4 * (1 + np.abs(label))
  if at_half:
    assert accuracy == 0.5 and tied.all()
  else:
    assert tied.mean() < 0.05


def test_mirror_verdicts_on_hand_made_seeds():
  from sharedbert.lab import probe_direction
  def entry(mean_by_variant):
    return {'symmetric_ceiling': 0.5, 'by_variant': {
        v: {'accuracy': a, 'mean': float(np.mean(a))} for v, a in mean_by_variant.items()}}
  tasks = {'mirror_rotary': entry({'shared': [0.9, 0.95, 0.97], 'symmetric': [0.5] * 3}),
           'mirror_phase': entry({'symmetric': [0.52, 0.6, 0.5]})}
  verdicts = {(v['variant'], v['positions']): v['verdict']
              for v in probe_direction.verdicts(tasks)}
  # symmetric + phase: mean 0.54 < 0.55, so not past the ceiling by the margin.
  assert verdicts == {('shared', 'rotary'): 'confirmed', ('symmetric', 'rotary'): 'confirmed',
                      ('symmetric', 'phase'): 'refuted'}
  tasks['mirror_rotary']['by_variant']['symmetric'] = {'accuracy': [0.5, 0.7, 0.5],
                                                       'mean': 0.5667}
  tasks['mirror_rotary']['by_variant']['shared'] = {'accuracy': [0.5, 0.5, 0.5], 'mean': 0.5}
  verdicts = {(v['variant'], v['positions']): v['verdict']
              for v in probe_direction.verdicts(tasks)}
  assert verdicts[('symmetric', 'rotary')] == 'refuted'
  assert verdicts[('shared', 'rotary')] == 'refuted'


def test_a_variants_own_setting_reaches_its_probe_model_and_the_masa_script_reads_it():
  """config.model may hold a variant's own setting (masa_coefficient_init): masa gets it,
  and the masa_init script's configs and condition numbers are what it reports."""
  from sharedbert.lab import masa_init
  config = masa_init.config_for('one_hot')
  cfg = probe.model_config(config, 'masa', 'induction')
  assert cfg.masa_coefficient_init == 'one_hot' and cfg.attention == 'masa'
  params = {'bert': {'shared_attention': {
      'q': {'coefficients': np.eye(2)}, 'k': {'coefficients': np.diag([1.0, 0.1])}}}}
  assert masa_init.condition_numbers(params) == {'k': pytest.approx(10.0), 'q': 1.0}
