"""partial_qk: per head, the first floor(rho*H) columns of Q and K come from one shared
projection ('query_key'), the rest from private ones (Yang et al., ENLSP 2024); rho =
model.qk_shared_fraction. rho=0 is `standard`, rho=1 is `symmetric`. Registered in
attention.VARIANTS when sharedbert.models is imported."""

from __future__ import annotations

import math

import jax.numpy as jnp

from sharedbert.config import validation
from sharedbert.errors import UserError
from sharedbert.models.attention import AttentionBase, _dense, register


def shared_qk_width(config) -> int:
  """floor(rho * H): the columns of each head that queries and keys share (partial_qk).

  Args:
    config: the ModelConfig.
  Returns:
    The shared columns per head.
  """
  head_dim = config.hidden_size // config.num_heads
  # The epsilon keeps e.g. 0.29 * 100 = 28.999999999999996 at 29.
  return int(math.floor(config.qk_shared_fraction * head_dim + 1e-9))


@register('partial_qk')
class PartialQKAttention(AttentionBase):
  """The first floor(rho*H) columns of each head's Q and K are shared ('query_key')."""
  config_keys = ('qk_shared_fraction',)
  settings = {'qk_shared_fraction': 0.5}  # rho: the share of each head's Q/K columns.
  setting_ranges = {'qk_shared_fraction': validation.number(0, 1)}

  @classmethod
  def param_formula(cls, config):
    d, n, r = config.hidden_size, config.num_heads, shared_qk_width(config)
    private = d // n - r
    per_layer = n * r * (d + 1) + 2 * n * private * (d + 1) + _dense(config)
    return config.num_layers * per_layer, config.num_layers * _dense(config)

  @classmethod
  def qkv_flops(cls, config):
    n, shared = config.num_heads, shared_qk_width(config)
    private = config.hidden_size // n - shared
    widths = [n * shared] if shared else []
    widths += [n * private, n * private] if private else []
    return widths + [config.hidden_size], 0

  @classmethod
  def settings_text(cls, config):
    h = config.hidden_size // config.num_heads
    return f'rho={config.qk_shared_fraction:g} ({shared_qk_width(config)}/{h} shared)'

  @classmethod
  def check_config(cls, config):
    if not 0.0 <= config.qk_shared_fraction <= 1.0:
      raise UserError(f'model.qk_shared_fraction must be in [0, 1], got '
                      f'{config.qk_shared_fraction}')

  def qkv(self, x, **kwargs):
    shared = shared_qk_width(self.config)
    private = self.head_dim - shared
    q_parts, k_parts = [], []
    if shared:
      both = self.projection('query_key', shared)(x)
      q_parts.append(both)
      k_parts.append(both)
    if private:
      q_parts.append(self.projection('query', private)(x))
      k_parts.append(self.projection('key', private)(x))
    q = q_parts[0] if len(q_parts) == 1 else jnp.concatenate(q_parts, axis=-1)
    k = k_parts[0] if len(k_parts) == 1 else jnp.concatenate(k_parts, axis=-1)
    return q, k, self.projection('value')(x)
