"""The task engine's padding, batching, fit and predict loops (sharedbert/tasks/engine.py)."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from sharedbert import sharding
from sharedbert.tasks import engine


def _mesh():
  cfg = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
  return sharding.make_mesh(cfg)


def _rows(lengths, width=32):
  ids = np.zeros((len(lengths), width), np.int32)
  for i, n in enumerate(lengths):
    ids[i, :n] = np.arange(1, n + 1) + 100 * i
  return {'input_ids': ids, 'segment_ids': (ids > 0).astype(np.int32),
          'labels': np.arange(len(lengths), dtype=np.int32)}


def test_subset_is_fixed_and_keeps_the_order():
  items = list(range(100))
  a = engine.subset(items, 10)
  assert a == engine.subset(items, 10) == sorted(a) and len(set(a)) == 10
  assert engine.subset(items, 0) is items and engine.subset(items, 100) is items
  # One generator for two draws: the second depends on the first (SQuAD's train, dev).
  rng = np.random.default_rng(0)
  assert engine.subset(items, 10, rng) == a
  assert engine.subset(items, 10, rng) != a


def test_widths():
  assert engine.padded_width(np.array([3, 9, 5]), 64) == 16
  assert engine.padded_width(np.array([60]), 62) == 62
  assert engine.padded_width(np.array([], np.int32), 64) == 8
  assert [engine.bucket_width(n, 48) for n in (1, 16, 17, 33, 48)] == [16, 16, 32, 48, 48]


def test_make_batch_pads_with_rows_of_weight_zero_and_splits_processes():
  arrays = _rows([3, 5, 2])
  b = engine.make_batch(arrays, np.array([2, 0]), 4, width=8)
  assert b['input_ids'].shape == (4, 8)
  np.testing.assert_array_equal(b['weights'], [1, 1, 0, 0])
  np.testing.assert_array_equal(b['labels'][:2], [2, 0])
  np.testing.assert_array_equal(b['input_mask'][0], [1, 1, 0, 0, 0, 0, 0, 0])
  second = engine.make_batch(arrays, np.array([2, 0, 1]), 4, process=(1, 2))
  np.testing.assert_array_equal(second['labels'], [1, 0])
  np.testing.assert_array_equal(second['weights'], [1, 0])


def test_predict_returns_every_row_in_order_whatever_the_buckets():
  mesh = _mesh()
  lengths = np.array([30, 2, 17, 9, 1, 25, 4, 12, 3, 20, 8, 5])
  arrays = _rows(lengths)
  widths = []

  def predict_fn(params, batch):
    widths.append(batch['input_ids'].shape[1])
    ids = batch['input_ids']
    return {'sum': jnp.sum(ids, axis=1) * params, 'len': jnp.sum(batch['input_mask'], axis=1)}

  out = engine.predict(predict_fn, 2, arrays, lengths, batch_size=8, mesh=mesh)
  np.testing.assert_array_equal(out['sum'], 2 * arrays['input_ids'].sum(axis=1))
  np.testing.assert_array_equal(out['len'], lengths)
  assert widths == [16, 32]  # Shortest rows first, each batch cropped to its bucket.
  full = engine.predict(predict_fn, 1, arrays, lengths, batch_size=8, mesh=mesh, bucket=False)
  np.testing.assert_array_equal(full['len'], lengths)
  assert widths[2:] == [32, 32]


def test_fit_epoch_visits_every_row_once_in_the_seeded_order():
  mesh = _mesh()
  arrays = _rows([3] * 19)
  seen = []

  def step_fn(state, batch):
    seen.append((np.asarray(batch['labels']), np.asarray(batch['weights'])))
    return state + 1, jnp.float32(state)

  state, losses = engine.fit_epoch(step_fn, 0, arrays, batch_size=8, seed=3, epoch=1,
                                   mesh=mesh)
  assert state == 3 and len(losses) == 3
  labels = np.concatenate([l[w > 0] for l, w in seen])
  np.testing.assert_array_equal(labels, np.random.default_rng([3, 1]).permutation(19))


def test_fit_epoch_keeps_at_most_two_steps_queued_and_stops_between_steps(monkeypatch):
  """Issue 56: the loop queued a whole epoch ahead of the device, so a SIGTERM was seen
  only when the epoch's losses were read. Before step i is queued, step i - 1 - IN_FLIGHT
  has finished; and a stop requested during step 2 ends the epoch right after it."""
  from sharedbert import interrupts
  mesh = _mesh()
  arrays = _rows([3] * 96)
  waited, queued = [], []

  class Loss:
    def __init__(self, i):
      self.i = i

    def block_until_ready(self):
      waited.append(self.i)
      return self

  def step_fn(state, batch):
    assert all(j in waited for j in range(state - engine.IN_FLIGHT)), (state, waited)
    queued.append(state)
    if state == 2 and not queued[:-1].count(2):  # The first epoch only.
      interrupts._received.append(interrupts.signal.SIGTERM)
    return state + 1, Loss(state)

  monkeypatch.setattr(interrupts, '_received', [])
  with pytest.raises(interrupts.Stopped):
    engine.fit_epoch(step_fn, 0, arrays, batch_size=8, seed=0, epoch=1, mesh=mesh)
  assert queued == [0, 1, 2] and waited == [0]
  interrupts._received.clear()
  engine.fit_epoch(step_fn, 0, arrays, batch_size=8, seed=0, epoch=1, mesh=mesh)
  assert queued[3:] == list(range(12)) and waited[1:] == list(range(12 - engine.IN_FLIGHT))


def test_compile_steps_starts_from_the_given_encoder():
  from sharedbert.models.bert import BertForSequenceClassification, ModelConfig
  from sharedbert import config as sb_config
  import optax
  cfg = ModelConfig(vocab_size=32, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                    max_position_embeddings=16)
  model = BertForSequenceClassification(cfg, 2)
  mesh = _mesh()
  rules = tuple(sb_config.DEFAULT_LOGICAL_AXIS_RULES)
  loss = lambda logits, batch: jnp.mean(logits) * 0.0 + jnp.sum(batch['weights'])
  steps = engine.compile_steps(model, optax.sgd(0.1), loss, mesh, rules)
  random = steps.init_state(jax.random.key(0), None)
  given = jax.tree.map(lambda x: x + 1.0, random.params['bert'])
  started = steps.init_state(jax.random.key(0), given)
  for a, b in zip(jax.tree.leaves(started.params['bert']), jax.tree.leaves(given)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  batch = engine.make_batch(_rows([3, 4], width=8), np.array([0, 1]), 8)
  batch.pop('labels')
  logits = steps.predict_fn(started.params, sharding.global_batch(batch, mesh))
  assert logits.shape == (8, 2)


def test_a_non_finite_step_leaves_the_state_as_it_was():
  """The engine's step (fine-tuning and the probes) skips a non-finite step like
  pretraining's: the parameters and optimizer state are kept, the step count advances, and
  the returned loss shows it."""
  import optax
  params = {'w': jnp.ones((3,))}
  tx = optax.adam(0.1)
  state = engine.State(step=jnp.zeros((), jnp.int32), params=params,
                       opt_state=tx.init(params), dropout_rng=jax.random.key(0))
  kw = dict(apply_fn=lambda p, batch, rng: p['w'] * batch['x'],
            loss_fn=lambda out, batch: jnp.sum(out ** 2), tx=tx)
  good, loss = engine.train_step(state, {'x': jnp.ones((3,))}, **kw)
  assert np.isfinite(loss) and not np.allclose(good.params['w'], 1.0)
  bad, loss = engine.train_step(state, {'x': jnp.array([1.0, np.nan, 1.0])}, **kw)
  assert not np.isfinite(loss) and int(bad.step) == 1
  np.testing.assert_array_equal(bad.params['w'], params['w'])
  for new, old in zip(jax.tree.leaves(bad.opt_state), jax.tree.leaves(state.opt_state)):
    np.testing.assert_array_equal(new, old)
  # Scanned, as the probes run it: the good steps apply, the bad one is skipped.
  batches = {'x': jnp.stack([jnp.ones(3), jnp.array([1.0, np.nan, 1.0]), jnp.ones(3)])}
  scanned, losses = engine.scanned_steps(state, batches, **kw)
  assert np.isfinite(losses).tolist() == [True, False, True] and int(scanned.step) == 3
  assert np.all(np.isfinite(scanned.params['w']))
