"""Embedding noise: its definition, and that level 0 reproduces the clean model exactly."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sharedbert.evaluators import robustness
from sharedbert.metrics import glue as glue_metrics
from sharedbert.evaluators.robustness import add_embedding_noise
from sharedbert.models.bert import BertForSequenceClassification, ModelConfig


def _tiny_classifier():
  cfg = ModelConfig(attention='shared', vocab_size=64, hidden_size=32, num_layers=1,
                    num_heads=2, mlp_dim=64, max_position_embeddings=32, dropout_rate=0.1,
                    attention_dropout_rate=0.1)
  model = BertForSequenceClassification(cfg, num_labels=2)
  z = jnp.zeros((1, 8), jnp.int32)
  params = model.init(jax.random.key(0), z, z, jnp.ones_like(z))['params']
  import flax.linen as nn
  return model, nn.unbox(params)


def _inputs(n=20, t=12, seed=0):
  rng = np.random.default_rng(seed)
  lengths = rng.integers(3, t + 1, size=n)
  ids = rng.integers(5, 64, size=(n, t)).astype(np.int32)
  ids[np.arange(t)[None, :] >= lengths[:, None]] = 0
  segments = (np.arange(t)[None, :] >= lengths[:, None] // 2).astype(np.int32)
  return ids, segments * (ids != 0), rng.integers(0, 2, size=n)


def test_noise_std_is_level_times_the_sequences_embedding_std():
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.normal(2.0, 3.0, size=(2, 50, 64)), jnp.float32)
  mask = np.ones((2, 50), np.int32)
  mask[1, 30:] = 0
  z = jax.random.normal(jax.random.key(0), x.shape)
  level = 0.25
  noisy = np.asarray(add_embedding_noise(x, level * z, jnp.asarray(mask)))
  added = noisy - np.asarray(x)
  for b in range(2):
    real = mask[b].astype(bool)
    sigma = np.asarray(x)[b, real].std()  # Over every feature of the non-pad tokens.
    np.testing.assert_allclose(added[b, real], level * sigma * np.asarray(z)[b, real],
                               rtol=1e-5, atol=1e-5)
    assert added[b, real].std() == pytest.approx(level * sigma, rel=0.05)
  # Padding gets no noise; zero noise changes nothing, bit for bit.
  np.testing.assert_array_equal(added[1, 30:], 0.0)
  np.testing.assert_array_equal(np.asarray(add_embedding_noise(x, 0.0 * z, jnp.asarray(mask))),
                                np.asarray(x))


def test_level_zero_reproduces_the_clean_score_exactly():
  model, params = _tiny_classifier()
  ids, segments, labels = _inputs()
  mask = (ids != 0).astype(np.int32)
  clean = np.asarray(model.apply({'params': params}, ids, segments, mask, deterministic=True))
  predict = robustness.make_noisy_predict(model)
  batches = robustness.make_batches(ids, segments, batch_size=8)
  at_zero = robustness.predict_with_noise(predict, params, batches, 0.0, noise_seed=3)
  np.testing.assert_allclose(at_zero, clean, rtol=0, atol=1e-6)
  assert (at_zero.argmax(-1) == clean.argmax(-1)).all()

  def score(logits):
    return glue_metrics.task_score('sst2', glue_metrics.task_metrics('sst2', logits, labels))

  result = robustness.evaluate(predict, params, batches, score, [0.0, 0.4], [0, 1, 2])
  clean_score = score(clean)
  assert result['scores'][0] == [clean_score] * 3
  assert result['mean'][0] == clean_score
  assert result['levels'] == [0.0, 0.4] and result['noise_seeds'] == [0, 1, 2]


def test_noise_is_reproducible_per_seed_and_changes_the_logits():
  model, params = _tiny_classifier()
  ids, segments, _ = _inputs(n=10)
  predict = robustness.make_noisy_predict(model)
  batches = robustness.make_batches(ids, segments, batch_size=4)
  a = robustness.predict_with_noise(predict, params, batches, 0.4, noise_seed=1)
  b = robustness.predict_with_noise(predict, params, batches, 0.4, noise_seed=1)
  c = robustness.predict_with_noise(predict, params, batches, 0.4, noise_seed=2)
  clean = robustness.predict_with_noise(predict, params, batches, 0.0, noise_seed=1)
  np.testing.assert_array_equal(a, b)
  assert np.abs(a - c).max() > 1e-4
  assert np.abs(a - clean).max() > 1e-4
  assert a.shape == (10, 2)
  # Padded rows of the last batch are dropped; batches are all the same shape.
  assert [bt['rows'] for bt in batches] == [4, 4, 2]
  assert {bt['input_ids'].shape for bt in batches} == {(4, ids.shape[1])}
