"""The one optimizer builder (sharedbert/optim.py) keeps each loop's recipe."""

import ml_collections
import pytest
import jax
import jax.numpy as jnp
import numpy as np

from sharedbert import optim
from sharedbert.tasks import squad


def _optim(**kw):
  base = dict(lr=1e-3, weight_decay=0.01, b1=0.9, b2=0.999, eps=1e-6, grad_clip_norm=1.0)
  return ml_collections.ConfigDict(dict(base, **kw))


def _rates(schedule, n):
  return np.asarray([float(schedule(s)) for s in range(n)])


def test_warmup_fraction_is_that_share_of_the_steps():
  # Fine-tuning's recipe: 10% of 23 steps rounds to 2 warmup steps.
  _, by_fraction = optim.make_optimizer(_optim(warmup_fraction=0.1), 23)
  _, by_steps = optim.make_optimizer(_optim(warmup_steps=2), 23)
  np.testing.assert_array_equal(_rates(by_fraction, 23), _rates(by_steps, 23))
  rates = _rates(by_steps, 23)
  np.testing.assert_allclose(rates[:2], [0.5e-3, 1e-3], rtol=1e-6)
  assert rates[-1] == 0.0
  assert np.all(np.diff(rates[2:]) < 0)  # Warmup ends at lr (step 1), decay from step 2.
  # A pretraining section (warmup_steps only) is used as it is.
  cfg = _optim(warmup_steps=5)
  assert optim.with_warmup_steps(cfg, 100) is cfg
  assert optim.with_warmup_steps(_optim(warmup_fraction=0.25), 10).warmup_steps == 2


def test_squad_uses_its_configured_optimizer():
  c = ml_collections.ConfigDict(dict(lr=5e-5, warmup_fraction=0.1))
  # Without an optim section: lr and warmup from the config, BERT's other values.
  assert squad.optimizer_config(c).to_dict() == dict(
      lr=5e-5, warmup_fraction=0.1, weight_decay=0.01, b1=0.9, b2=0.999, eps=1e-6,
      grad_clip_norm=1.0)
  c.optim = _optim(warmup_fraction=0.2, weight_decay=0.0)
  assert squad.optimizer_config(c) is c.optim


def test_a_warmup_as_long_as_the_run_is_clamped_to_a_tenth():
  """The rate rises, then falls to exactly 0 at the last step, even when warmup_steps is a
  preset's 10,000 and the run has 40 steps; a shorter warmup is kept as it is."""
  assert optim.effective_warmup(10_000, 40) == 4 and optim.effective_warmup(40, 40) == 4
  assert optim.effective_warmup(39, 40) == 39 and optim.effective_warmup(0, 40) == 0
  _, schedule = optim.make_optimizer(_optim(lr=1e-3, warmup_steps=10_000), 40)
  rates = [float(schedule(s)) for s in range(40)]
  assert rates[3] == pytest.approx(1e-3) and rates[-1] == 0.0
  assert all(a < b for a, b in zip(rates[:4], rates[1:4]))
  assert rates[4] == pytest.approx(1e-3)  # The peak is held one step, then the decay.
  assert all(a > b for a, b in zip(rates[4:], rates[5:]))
  note = optim.clamp_note(_optim(warmup_steps=10_000), 40)
  assert note.startswith('optim.warmup_steps=10000 is not below total_steps=40: warming up '
                         'over 4 steps') and '\n' not in note
  assert optim.clamp_note(_optim(warmup_steps=5), 40) == ''


def test_schedule_steps_sets_the_decay_apart_from_where_the_run_stops():
  _, long = optim.make_optimizer(_optim(warmup_steps=4), 20)
  _, stopped = optim.make_optimizer(_optim(warmup_steps=4, schedule_steps=20), 8)
  np.testing.assert_array_equal(_rates(stopped, 8), _rates(long, 8))
  assert float(stopped(7)) > 0  # Part-way down: not the 8-step schedule's zero.
  _, zero = optim.make_optimizer(_optim(warmup_steps=4, schedule_steps=0), 8)
  assert float(zero(7)) == 0.0
  # The clamp note reads the schedule too: a warmup inside it is not clamped.
  assert optim.clamp_note(_optim(warmup_steps=10, schedule_steps=100), 8) == ''


def _guarded_step(num_leaves):
  params = {f'w{i}': jnp.full((4, 8), 0.1 * (i + 1)) for i in range(num_leaves)}
  tx, _ = optim.make_optimizer(_optim(warmup_steps=1), 10)

  def step(params, opt_state, grads, loss):
    return optim.guarded_update(tx, grads, opt_state, params, loss)
  return jax.jit(step), params, tx.init(params)


def test_the_non_finite_guard_keeps_everything_and_applies_a_finite_step():
  step, params, opt_state = _guarded_step(3)
  grads = jax.tree.map(jnp.ones_like, params)
  new, _, finite = step(params, opt_state, grads, jnp.float32(1.0))
  assert bool(finite) and all(not np.allclose(new[k], params[k]) for k in params)
  bad = dict(grads, w1=grads['w1'].at[0, 0].set(jnp.nan))
  for loss, g in ((jnp.float32(jnp.inf), grads), (jnp.float32(1.0), bad)):
    kept, kept_state, finite = step(params, opt_state, g, loss)
    assert not bool(finite)
    jax.tree.map(np.testing.assert_array_equal, kept, params)
    jax.tree.map(np.testing.assert_array_equal, kept_state[1][0].mu, opt_state[1][0].mu)
  assert bool(optim.computed_once(jnp.bool_(True)))
  assert not bool(optim.computed_once(jnp.bool_(False)))


def test_the_non_finite_flag_is_computed_once_not_once_per_parameter():
  # The flag is an `and` over the gradient's leaves. XLA copied that chain into each of the
  # ~3 x leaves selects reading it (parameters, Adam's two moments): 6,700 `and`s in the tiny
  # preset's compiled step, half its compile time. Made once, the chain appears once.
  from sharedbert import pretrain_step
  from sharedbert.models.bert import BertForPretraining
  from test_scan import batch, configs, init, optim_config, state_for
  cfg, _ = configs('standard')
  params = jax.tree.map(jnp.asarray, init(cfg))
  tx, schedule = optim.make_optimizer(optim_config(), 10)
  step = jax.jit(lambda s, b: pretrain_step.train_step(
      s, b, model=BertForPretraining(cfg), tx=tx, schedule=schedule,
      base_rng=jax.random.key(1), accum_steps=1))
  text = step.lower(state_for(params, tx), batch()).compile().as_text()
  leaves = len(jax.tree.leaves(params))
  assert text.count(' and(') < 4 * leaves, (text.count(' and('), leaves)
