"""The dropout of sharedbert.models.dropout: its rate, scaling, determinism and interface."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sharedbert.models import dropout


@pytest.mark.parametrize('shape', [(64, 4, 128, 128), (1000, 33)])  # Even and odd last axis.
@pytest.mark.parametrize('rate', [0.1, 0.5])
def test_keep_mask_rate(shape, rate):
  keep = dropout.keep_mask(jax.random.key(0), rate, shape)
  assert keep.shape == shape and keep.dtype == jnp.bool_
  n = np.prod(shape)
  dropped = 1.0 - float(jnp.mean(keep))
  # Five standard deviations of a binomial proportion.
  assert abs(dropped - rate) < 5 * np.sqrt(rate * (1 - rate) / n)
  # Both halves of each random word are used and independent of each other.
  if shape[-1] % 2 == 0:
    half = shape[-1] // 2
    lo, hi = np.asarray(keep[..., :half]), np.asarray(keep[..., half:])
    both_dropped = float(np.mean(~lo & ~hi))
    assert abs(both_dropped - rate ** 2) < 5 * np.sqrt(rate ** 2 / (n / 2)) + 1e-3


def test_masks_differ_by_key_and_repeat_for_the_same_key():
  a = dropout.keep_mask(jax.random.key(1), 0.1, (8, 128))
  b = dropout.keep_mask(jax.random.key(2), 0.1, (8, 128))
  again = dropout.keep_mask(jax.random.key(1), 0.1, (8, 128))
  assert not np.array_equal(a, b)
  np.testing.assert_array_equal(a, again)


def test_module_scales_kept_values_and_is_identity_when_deterministic():
  x = jnp.ones((16, 64), jnp.float32)
  layer = dropout.Dropout(0.25)
  y = layer.apply({}, x, deterministic=False, rngs={'dropout': jax.random.key(0)})
  values = set(np.unique(np.asarray(y)).tolist())
  assert values == {0.0, float(np.float32(1.0) / np.float32(0.75))}
  np.testing.assert_array_equal(layer.apply({}, x, deterministic=True), x)
  np.testing.assert_array_equal(dropout.Dropout(0.0).apply({}, x, deterministic=False), x)
  np.testing.assert_array_equal(
      dropout.Dropout(1.0).apply({}, x, deterministic=False, rngs={'dropout': jax.random.key(0)}),
      jnp.zeros_like(x))


def test_bfloat16_keeps_its_dtype():
  x = jnp.ones((4, 8), jnp.bfloat16)
  y = dropout.apply(x, 0.1, jax.random.key(0))
  assert y.dtype == jnp.bfloat16


def test_same_interface_as_flax_dropout_inside_a_module():
  class Net(nn.Module):
    @nn.compact
    def __call__(self, x, deterministic):
      return dropout.Dropout(0.5)(nn.Dense(4)(x), deterministic=deterministic)

  x = jnp.ones((2, 3))
  params = Net().init(jax.random.key(0), x, True)
  out1 = Net().apply(params, x, False, rngs={'dropout': jax.random.key(1)})
  out2 = Net().apply(params, x, False, rngs={'dropout': jax.random.key(1)})
  np.testing.assert_array_equal(out1, out2)
