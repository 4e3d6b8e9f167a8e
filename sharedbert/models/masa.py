"""MASA attention (Zhussip et al., arXiv 2508.04581): for each projection type t in
model.masa_projections, S atoms shared by all layers and per-layer coefficients; layer l
uses W = sum_s c_t[l, s] A_t,s. The dictionary belongs to the encoder (`MasaDictionary`,
under bert/shared_attention) and reaches every layer as `shared`; biases stay per layer.
Registered as 'masa' in sharedbert.models.attention's registry (sharedbert/models/__init__.py
imports this module, so the registry always holds it)."""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from sharedbert.config import validation
from sharedbert.errors import UserError
from sharedbert.models.attention import AttentionBase, _dense, register
from sharedbert.models.layers import kernel_init, matmul
from sharedbert.models import fit as fit_lib


# masa projection types and the names of the per-layer modules that hold their biases.
MASA_TYPES = {'q': 'query', 'k': 'key', 'v': 'value', 'o': 'out'}


def masa_num_atoms(config) -> int:
  """S: model.masa_atoms, or ceil(L/3) (the paper's 66.7% setting) when it is 0.

  Args:
    config: the ModelConfig.
  Returns:
    S.
  """
  return config.masa_atoms or -(-config.num_layers // 3)


def masa_atom_shape(config, projection_type: str):
  """Shape and logical axis names of one type's atoms: [S,D,N,H] (q, k, v) or [S,N,H,D] (o).

  Args:
    config: the ModelConfig.
    projection_type: 'q', 'k', 'v' or 'o'.
  Returns:
    (shape, logical axis names).
  """
  d, n, s = config.hidden_size, config.num_heads, masa_num_atoms(config)
  h = d // n
  if projection_type == 'o':
    return (s, n, h, d), ('atoms', 'heads', 'kv', 'embed')
  return (s, d, n, h), ('atoms', 'embed', 'heads', 'kv')


COEFFICIENT_INITS = ('normal', 'one_hot', 'orthogonal')


def coefficient_initializer(scheme: str, num_layers: int, num_atoms: int):
  """The [L, S] coefficients' start (model.masa_coefficient_init), each row of norm about 1
  so that every layer's W starts at BERT's initial scale:
    normal      N(0, 1/S): every layer a random mix of every atom (the default);
    one_hot     layer l on atom l mod S alone (with S < L, layers l and l + S start tied);
    orthogonal  a random orthogonal matrix (rows orthonormal for L <= S, columns scaled by
                sqrt(L/S) beyond), so every layer mixes every atom, perfectly conditioned.

  Args:
    scheme: 'normal', 'one_hot' or 'orthogonal'.
    num_layers: L.
    num_atoms: S.
  Returns:
    A flax initializer for [L, S].
  """
  if scheme == 'normal':
    return nn.initializers.normal(1.0 / math.sqrt(num_atoms))
  if scheme == 'one_hot':
    return lambda key, shape, dtype=jnp.float32: jnp.eye(
        num_atoms, dtype=dtype)[jnp.arange(shape[0]) % num_atoms]
  if scheme == 'orthogonal':
    return nn.initializers.orthogonal(scale=math.sqrt(max(1.0, num_layers / num_atoms)))
  raise ValueError(f'unknown masa_coefficient_init {scheme!r}')


class MasaTypeDictionary(nn.Module):
  """One projection type's atoms [S, ...] and coefficients [L, S]."""
  config: Any
  projection_type: str

  @nn.compact
  def __call__(self):
    c = self.config
    shape, names = masa_atom_shape(c, self.projection_type)
    atoms = self.param('atoms', kernel_init(c.initializer_range, names), shape, c.param_dtype)
    num_atoms = masa_num_atoms(c)
    coefficients = self.param('coefficients', nn.with_logical_partitioning(
        coefficient_initializer(c.masa_coefficient_init, c.num_layers, num_atoms),
        ('layers', 'atoms')), (c.num_layers, num_atoms), c.param_dtype)
    return {'atoms': atoms, 'coefficients': coefficients}


class MasaDictionary(nn.Module):
  """The encoder's dictionary: {type: {'atoms', 'coefficients'}} for each masa type."""
  config: Any

  @nn.compact
  def __call__(self):
    return {t: MasaTypeDictionary(self.config, t, name=t)()
            for t in self.config.masa_projections}


@register('masa')
class MasaAttention(AttentionBase):
  """Each configured projection's kernel is sum_s c[l, s] A_s from the encoder's dictionary."""
  shared_params = MasaDictionary
  config_keys = ('masa_atoms', 'masa_projections')
  paper_figures = ('Zhussip et al., arXiv 2508.04581 (Q,K,V,O with S = L/3)',
                   {'attention': 66.7}, None)
  output_names = ('out', 'o')  # The layer's W_o bias; the dictionary's o atoms.

  @classmethod
  def param_formula(cls, config):
    d, layers, s = config.hidden_size, config.num_layers, masa_num_atoms(config)
    per_type = s * d * d + layers * s + layers * d  # Atoms, coefficients, biases.
    qkv_types = len(set(config.masa_projections) & set('qkv'))
    dense = layers * _dense(config)
    out = per_type if 'o' in config.masa_projections else dense
    return qkv_types * per_type + (3 - qkv_types) * dense, out

  @classmethod
  def qkv_flops(cls, config):
    return [config.hidden_size] * 3, 0

  @classmethod
  def extra_flops(cls, config):
    """Each layer's kernels sum_s c[l, s] A_s: a [1, S] x [S, D*D] product per projection type
    and layer, independent of the batch."""
    d = config.hidden_size
    return {'masa_kernels': config.num_layers * len(config.masa_projections)
            * matmul(1, d * d, masa_num_atoms(config))}

  @classmethod
  def resolved_settings(cls, model):
    out = super().resolved_settings(model)
    if 'masa_atoms' in out and 'num_layers' in model:  # 0 means ceil(L/3): the same model.
      out['masa_atoms'] = out['masa_atoms'] or -(-model['num_layers'] // 3)
    return out

  @classmethod
  def settings_text(cls, config):
    return f'S={masa_num_atoms(config)}, {config.masa_projections}'

  @classmethod
  def paper_applies(cls, config):
    return masa_num_atoms(config) == 4 and sorted(config.masa_projections) == sorted('qkvo')

  conversion_fits = ('pca',)
  # S atoms per projection type (0: ceil(L/3)), the types drawn from the dictionary, and
  # the coefficients' start (coefficient_initializer: it changes no shape, only the init).
  settings = {'masa_atoms': 4, 'masa_projections': 'qkvo', 'masa_coefficient_init': 'normal'}
  setting_ranges = {
      'masa_atoms': validation.integer(0, text='a positive integer, or 0 for ceil(L / 3)'),
      'masa_coefficient_init': validation.one_of(*COEFFICIENT_INITS)}

  @classmethod
  def from_standard(cls, layers, config, fit=None, moments=None):
    cls.conversion_fit(fit, moments)
    dictionary, new_layers, errors = fit_lib.fit_masa(
        layers, masa_num_atoms(config), {t: MASA_TYPES[t] for t in config.masa_projections})
    types = list(config.masa_projections)
    header = ['layer'] + [MASA_TYPES[t] for t in types]
    rows = [[str(i)] + [f'{errors[t][i]:.2e}' for t in types] for i in range(len(layers))]
    what = (f'S={masa_num_atoms(config)} atoms per type ({config.masa_projections}) for '
            f'{config.num_layers} layers (matrix PCA)')
    return fit_lib.Conversion(new_layers, dictionary, header, rows, what)

  @classmethod
  def check_config(cls, config):
    p = config.masa_projections
    if not p or set(p) - set(MASA_TYPES) or len(set(p)) != len(p):
      raise UserError(f'model.masa_projections must be distinct letters of "qkvo" (e.g. "qkvo" '
                      f'or "qk"), got {p!r}')

  def layer_kernel(self, shared, projection_type: str):
    """This layer's W for one type, or None if that type is not in the dictionary."""
    if projection_type not in self.config.masa_projections:
      return None
    if shared is None:
      raise ValueError('masa attention needs the encoder\'s dictionary (shared=...)')
    entry = shared[projection_type]
    # jnp: under model.scan_layers the index is traced, which a NumPy array cannot take.
    coefficients = jnp.asarray(entry['coefficients'])[self.layer_index]
    return jnp.einsum('A,A...->...', coefficients, entry['atoms'])

  def qkv(self, x, shared=None, **kwargs):
    return tuple(self.projection(MASA_TYPES[t])(x, self.layer_kernel(shared, t)) for t in 'qkv')

  def output_kernel(self, shared=None, **kwargs):
    return self.layer_kernel(shared, 'o')
