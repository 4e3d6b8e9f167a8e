"""BERT encoder, masked-LM head and classification head (Flax Linen).

Parameter names follow Hugging Face's `BertModel` closely so that checkpoints convert
one-to-one (`sharedbert/convert/hf.py`). Every parameter carries logical axis names from
one vocabulary (vocab, embed, heads, kv, mlp, qkv, layers, atoms); `sharedbert.sharding`
maps them onto the device mesh.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from sharedbert.errors import UserError
from sharedbert.models import attention as attention_lib
from sharedbert.models.layers import kernel_init, zeros_init
from sharedbert.models.dropout import Dropout  # nn.Dropout's interface, cheaper masks.
from sharedbert.config import validation

Dtype = Any


# Settings that were ModelConfig fields before each variant declared its own (config
# files, workdirs and checkpoints written then carry them for every variant):
# `from_config` drops them where the chosen variant does not declare them.
LEGACY_SETTINGS = ('diag_init', 'diag_init_scheme', 'pairwise_init_std', 'qk_shared_fraction',
                   'masa_atoms', 'masa_projections')


@dataclasses.dataclass(frozen=True, init=False)
class ModelConfig:
  """The model's hyperparameters; built from `config.model` by `from_config`.

  The fields below are every variant's. A variant's own settings (its class's `settings`,
  e.g. shared's diag_init_scheme) are keyword arguments too, read as attributes
  (`model_cfg.diag_init_scheme`) and kept, all of them, in `variant_settings`; a setting the
  variant does not declare is a TypeError.
  """
  attention: str = 'standard'
  vocab_size: int = 30522
  hidden_size: int = 768
  num_layers: int = 12
  num_heads: int = 12
  mlp_dim: int = 3072
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  initializer_range: float = 0.02
  layer_norm_eps: float = 1e-12
  pre_layer_norm: bool = False
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32
  remat: str = 'none'
  scan_layers: bool = False
  attention_impl: str = 'xla'
  one_hot_embeddings: bool = False
  # 'learned': BERT's table added to the input; 'rotary': queries and keys rotated by their
  # positions (sharedbert/models/rotary.py), no table; 'none': an order-free input.
  position_embeddings: str = 'learned'
  rope_theta: float = 10000.0          # rotary: the frequencies' base (RoFormer's 10,000).
  rope_query_phase: float = 0.0        # rotary: phi, queries turned by (i + phi) * w.
  # Probe setting (sharedbert/lab/probe.py); BERT is bidirectional.
  causal: bool = False                 # Token t attends to tokens <= t only.
  # The settings a variant declares for itself (its class's `settings`: name -> default),
  # as sorted (name, value) pairs; read as attributes (config.<name>), written flat.
  variant_settings: tuple = ()

  def __init__(self, **values):
    names = [f.name for f in dataclasses.fields(self)]
    own = dict(values.pop('variant_settings', ()))
    fields = {k: values.pop(k) for k in list(values) if k in names}
    for f in dataclasses.fields(self):
      object.__setattr__(self, f.name, fields.get(f.name, f.default))
    declared = getattr(attention_lib.VARIANTS.get(self.attention), 'settings', {})
    unknown = sorted(set(values) - set(declared))
    if unknown:
      raise TypeError(f'ModelConfig: {", ".join(unknown)} is not a field, nor a setting of '
                      f'the {self.attention!r} attention variant (its settings: '
                      f'{", ".join(sorted(declared)) or "none"})')
    # Every declared setting, given or default, so that equal models compare equal; a
    # carried setting of another variant (after replace(attention=...)) is dropped.
    own = {k: v for k, v in own.items() if k in declared}
    own.update(values)
    object.__setattr__(self, 'variant_settings',
                       tuple(sorted({**declared, **own}.items())))

  def replace(self, **changes) -> 'ModelConfig':
    """A copy with `changes` (fields or the variant's settings; on a change of variant,
    the new variant's settings start from their defaults unless given)."""
    values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
    values.update(changes)
    return ModelConfig(**values)

  def __getattr__(self, name: str):
    # Only reached for names that are not fields: a variant's own setting, or its default.
    if name.startswith('__') or name == 'variant_settings':
      raise AttributeError(name)
    own = dict(self.variant_settings)
    if name in own:
      return own[name]
    declared = getattr(attention_lib.VARIANTS.get(self.attention), 'settings', {})
    if name in declared:
      return declared[name]
    raise AttributeError(f'ModelConfig has no field or {self.attention} setting {name!r}')

  @classmethod
  def from_config(cls, model_cfg) -> 'ModelConfig':
    """The ModelConfig of a config's `model` section, checked (validate). Keys that are not
    fields must be settings the chosen variant declares (its class's `settings`)."""
    values = dict(model_cfg)
    names = {f.name for f in dataclasses.fields(cls)}
    variant = attention_lib.VARIANTS.get(values.get('attention', 'standard'))
    declared = getattr(variant, 'settings', {})
    own = {k: values.pop(k) for k in list(values) if k not in names and k in declared}
    for key in LEGACY_SETTINGS:  # Another variant's, from an older config: not this model's.
      values.pop(key, None)
    if own:
      values['variant_settings'] = tuple(sorted(own.items()))
    unknown = set(values) - names
    if unknown:
      raise UserError(f'unknown model config keys: {sorted(unknown)}')
    for key in ('dtype', 'param_dtype'):
      if key in values:
        values[key] = _dtype(values[key])
    if 'position_embeddings' in values:
      values['position_embeddings'] = position_embeddings_value(values['position_embeddings'])
    cfg = cls(**values)
    cfg.validate()
    return cfg

  def validate(self):
    """Raises a UserError for a value out of range or a setting the variant refuses."""
    # The range of every key (sharedbert/config/validation.py).
    validation.model(self)
    if self.attention not in attention_lib.VARIANTS:
      raise UserError(f'unknown attention variant {self.attention!r} (config.model.attention); '
                      f'choose one of: {", ".join(sorted(attention_lib.VARIANTS))}')
    variant = attention_lib.VARIANTS[self.attention]
    for name, valid in variant.setting_ranges.items():
      valid.check(f'model.{name}', getattr(self, name))
    variant.check_config(self)
    if self.scan_layers and not variant.scannable:
      raise UserError(f'the attention variant {self.attention!r} cannot be scanned (it needs '
                      'each layer\'s index as a Python int); set model.scan_layers=False')
    if self.hidden_size % self.num_heads:
      raise UserError(f'model.hidden_size={self.hidden_size} is not divisible by '
                      f'model.num_heads={self.num_heads}')
    if self.remat not in ('none', 'full', 'dots'):
      raise UserError(f"model.remat must be 'none', 'full' or 'dots', not {self.remat!r}")
    if self.attention_impl not in ('xla', 'fused', 'cudnn'):
      raise UserError("model.attention_impl must be 'xla', 'fused' or 'cudnn', not "
                      f"{self.attention_impl!r}")
    if self.position_embeddings == 'rotary' and (self.hidden_size // self.num_heads) % 2:
      raise UserError(f'model.position_embeddings=rotary turns pairs of columns, so the head '
                      f'width must be even, not {self.hidden_size // self.num_heads} '
                      f'(hidden_size {self.hidden_size} / num_heads {self.num_heads})')
    if self.position_embeddings != 'rotary' and (self.rope_query_phase != 0
                                                  or self.rope_theta != 10000.0):
      raise UserError('model.rope_theta and model.rope_query_phase apply to rotary positions '
                      f'only; model.position_embeddings is {self.position_embeddings!r}')
    if self.attention_impl == 'cudnn' and jnp.dtype(self.dtype) not in (jnp.bfloat16,
                                                                          jnp.float16):
      raise UserError("model.attention_impl='cudnn' needs model.dtype bfloat16 or float16 "
                      f"(cuDNN's fused attention), not {jnp.dtype(self.dtype).name}")

  def attention_impl_note(self) -> str | None:
    """Why training will not use the requested attention_impl, if it will not."""
    if self.attention_impl != 'xla' and self.attention_dropout_rate > 0:
      return (f"model.attention_impl={self.attention_impl!r} applies to evaluation only: "
              f"with model.attention_dropout_rate={self.attention_dropout_rate:g}, training "
              "steps use the einsum path (jax.nn.dot_product_attention has no dropout); set "
              "the rate to 0 for the fused kernel in training too")
    return None

  def to_dict(self) -> dict:
    """The fields as JSON-ready values (dtypes by name), a variant's own settings as keys of
    their own, as a config file writes them."""
    d = dataclasses.asdict(self)
    d['dtype'] = jnp.dtype(self.dtype).name
    d['param_dtype'] = jnp.dtype(self.param_dtype).name
    d.update(dict(d.pop('variant_settings')))
    return d


def position_embeddings_value(value):
  """model.position_embeddings as one of 'learned', 'rotary', 'none'. The boolean of
  configs and workdirs written before rotary existed maps one to one (True: the table,
  False: none); the strings 'true'/'false' of a command line are refused, naming the values.

  Args:
    value: the config's value.
  Returns:
    'learned', 'rotary' or 'none' (other strings are left for validation to refuse).
  """
  if value is True or value is False:
    return 'learned' if value else 'none'
  if isinstance(value, str) and value.lower() in ('true', 'false', '1', '0', 'yes', 'no'):
    raise UserError(f'model.position_embeddings={value} is no longer a boolean; use '
                    "'learned' (the table, the old true), 'rotary' or 'none' (the old false)")
  return value


def _dtype(name):
  try:
    return jnp.dtype(name)
  except TypeError as e:
    raise UserError(f'unknown dtype {name!r} in config.model; use float32 or bfloat16') from e


def layer_norm(cfg: ModelConfig, name: str):
  """BERT's LayerNorm with the config's epsilon and dtypes, its scale and bias on 'embed'.

  Args:
    cfg: the ModelConfig.
    name: the module's name.
  Returns:
    An nn.LayerNorm.
  """
  return nn.LayerNorm(
      epsilon=cfg.layer_norm_eps, dtype=cfg.dtype, param_dtype=cfg.param_dtype,
      scale_init=nn.with_logical_partitioning(nn.initializers.ones_init(), ('embed',)),
      bias_init=zeros_init(('embed',)), name=name)


def gelu(x):
  """BERT's exact GELU, x * Phi(x), in the original BERT code's form 0.5 x (1 + erf(x/sqrt 2)).

  `jax.nn.gelu(approximate=False)` computes the same function through erfc, which XLA:CPU
  evaluates about twice as slowly; the two differ by about 1e-6 (BENCHMARKS.md, issue 18).

  Args:
    x: any array.
  Returns:
    GELU(x), x's shape and dtype.
  """
  return 0.5 * x * (1.0 + jax.lax.erf(x * jnp.asarray(np.sqrt(0.5), x.dtype)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def take_rows_one_hot_grad(table, ids, grad_dtype):
  """table[ids], whose table gradient is the product one_hot(ids)^T g (operands in
  grad_dtype, summed in float32) instead of a scatter-add (`model.one_hot_embeddings`).

  Args:
    table: [V, D] embedding table.
    ids: [...] int32 rows.
    grad_dtype: the operands' dtype in the backward product.
  Returns:
    [..., D].
  """
  return jnp.take(table, ids, axis=0)


def _take_rows_fwd(table, ids, grad_dtype):
  return jnp.take(table, ids, axis=0), (table, ids)  # The table is a live parameter anyway.


def _take_rows_bwd(grad_dtype, residuals, g):
  table, ids = residuals
  one_hot = jax.nn.one_hot(ids.reshape(-1), table.shape[0], dtype=grad_dtype)
  g = g.reshape(-1, g.shape[-1]).astype(grad_dtype)
  grad = jnp.einsum('NV,ND->VD', one_hot, g, preferred_element_type=jnp.float32)
  return grad.astype(table.dtype), np.zeros(ids.shape, jax.dtypes.float0)


take_rows_one_hot_grad.defvjp(_take_rows_fwd, _take_rows_bwd)


def dense(cfg: ModelConfig, features: int, names: tuple[str, str], name: str):
  """A Dense layer of `features` outputs, BERT's init, its kernel on logical axes `names`.

  Args:
    cfg: the ModelConfig.
    features: the outputs.
    names: the kernel's logical axes (input, output).
    name: the module's name.
  Returns:
    An nn.Dense.
  """
  return nn.Dense(features, dtype=cfg.dtype, param_dtype=cfg.param_dtype,
                  kernel_init=kernel_init(cfg.initializer_range, names),
                  bias_init=zeros_init(names[1:]), name=name)


class Embeddings(nn.Module):
  """Token + position + segment embeddings, then LayerNorm and dropout."""
  config: ModelConfig

  def setup(self):
    c = self.config
    def embed(num, name):
      return nn.Embed(num, c.hidden_size, dtype=c.dtype, param_dtype=c.param_dtype,
                      embedding_init=kernel_init(c.initializer_range,
                                                 ('vocab' if name == 'word_embeddings' else None,
                                                  'embed')),
                      name=name)
    self.word_embeddings = embed(c.vocab_size, 'word_embeddings')
    if c.position_embeddings == 'learned':
      self.position_embeddings = embed(c.max_position_embeddings, 'position_embeddings')
    self.token_type_embeddings = embed(c.type_vocab_size, 'token_type_embeddings')
    self.LayerNorm = layer_norm(c, 'LayerNorm')
    self.dropout = Dropout(c.dropout_rate)

  def __call__(self, input_ids, segment_ids, *, deterministic: bool):
    # Looked up and summed in the parameters' dtype, cast once: in the backward pass every
    # token's gradient is added into the tables in float32. Done in bfloat16 (nn.Embed casts
    # the table first), that scatter-add rounds at each add, and XLA:GPU runs it as a
    # compare-and-swap loop (openxla/xla#26371; BENCHMARKS.md, GPU).
    length, table_rows = input_ids.shape[1], self.config.max_position_embeddings
    learned = self.config.position_embeddings == 'learned'
    if learned and length > table_rows:  # A slice past the table would be shorter, not an error.
      raise UserError(f'sequences of {length} tokens exceed model.max_position_embeddings='
                      f'{table_rows}')
    if self.config.one_hot_embeddings:  # The gradient as a product: no contended scatter.
      words = take_rows_one_hot_grad(self.word_embeddings.embedding, input_ids,
                                     jnp.dtype(self.config.dtype))
    else:
      words = jnp.take(self.word_embeddings.embedding, input_ids, axis=0)
    if learned:
      positions = self.position_embeddings.embedding[:length][None]  # A slice, no gather.
    else:
      positions = jnp.zeros((), self.config.param_dtype)
    # Segments as a one-hot weighted sum of their few rows (elementwise; the weights are 0 and
    # 1, so exact): as a gather, its gradient adds every token into one of 2 rows, a queue of
    # atomic adds on the same addresses on a GPU; here it is a sum over the tokens.
    table = self.token_type_embeddings.embedding
    one_hot = jax.nn.one_hot(segment_ids, table.shape[0], dtype=table.dtype)
    segments = jnp.sum(one_hot[..., None] * table, axis=-2)
    x = (words + positions + segments).astype(self.config.dtype)
    return self.dropout(self.LayerNorm(x), deterministic=deterministic)

  def attend(self, x):
    """The tied output projection: x [..., D] -> logits [..., V]."""
    return self.word_embeddings.attend(x)


class FeedForward(nn.Module):
  """The FFN sublayer: dense to mlp_dim, GELU, dense back to hidden_size."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x):
    c = self.config
    h = dense(c, c.mlp_dim, ('embed', 'mlp'), 'intermediate')(x)
    h = gelu(h)
    h = nn.with_logical_constraint(h, ('batch', 'length', 'mlp'))
    return dense(c, c.hidden_size, ('mlp', 'embed'), 'output')(h)


class EncoderLayer(nn.Module):
  """Attention and FFN sublayers with residuals; post-LN as BERT, or pre-LN."""
  config: ModelConfig
  layer_index: int = 0

  @nn.compact
  def __call__(self, x, mask, deterministic: bool, shared: Any = None):
    return self.sublayers(x, mask, deterministic, shared, self.layer_index)

  def sublayers(self, x, mask, deterministic: bool, shared: Any, layer_index):
    """The layer's computation (its modules are made here, inside the compact call)."""
    c = self.config
    attn = attention_lib.VARIANTS[c.attention](c, layer_index, name='attention')
    ffn = FeedForward(c, name='mlp')
    drop = Dropout(c.dropout_rate)
    kwargs = {} if shared is None else {'shared': shared}
    if c.pre_layer_norm:
      x = x + drop(attn(layer_norm(c, 'attention_norm')(x), mask, deterministic=deterministic,
                        **kwargs), deterministic=deterministic)
      x = x + drop(ffn(layer_norm(c, 'output_norm')(x)), deterministic=deterministic)
    else:
      x = layer_norm(c, 'attention_norm')(
          x + drop(attn(x, mask, deterministic=deterministic, **kwargs),
                   deterministic=deterministic))
      x = layer_norm(c, 'output_norm')(x + drop(ffn(x), deterministic=deterministic))
    return nn.with_logical_constraint(x, ('batch', 'length', 'embed'))


class ScannedEncoderLayer(EncoderLayer):
  """One layer as the body of nn.scan over the stack (model.scan_layers).

  The layer index is scanned over (jnp.arange(L)), so a variant that indexes per-layer
  parameters (masa's coefficients) does so with a traced index; the mask and the encoder's
  cross-layer params are broadcast. Returns (x, x) to collect hidden states, else (x, None).
  """

  @nn.compact
  def __call__(self, x, layer_index, mask, shared, deterministic: bool, hidden_states: bool):
    x = self.sublayers(x, mask, deterministic, shared, layer_index)
    return x, (x if hidden_states else None)


def scanned_layers(c: ModelConfig):
  """nn.scan over the encoder layers: params stacked on a leading 'layers' axis, with
  nn.remat inside the body when model.remat asks for it.

  Args:
    c: the ModelConfig.
  Returns:
    The scanned layer class (nn.scan of ScannedEncoderLayer).
  """
  body = ScannedEncoderLayer
  if c.remat != 'none':
    # deterministic and hidden_states (arguments 5 and 6, counting the module) are static.
    body = nn.remat(body, policy=_REMAT_POLICIES[c.remat], prevent_cse=False,
                    static_argnums=(5, 6))
  # The diagnostics' sown collections stack on the layer axis too (bert.attention_statistics).
  return nn.scan(body, variable_axes={'params': 0, 'intermediates': 0, 'attention_logits': 0},
                 split_rngs={'params': True, 'dropout': True},
                 in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast),
                 length=c.num_layers, metadata_params={nn.PARTITION_NAME: 'layers'})


_REMAT_POLICIES = {
    'full': None,  # Recompute everything in the backward pass.
    'dots': jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,
}


class BertEncoder(nn.Module):
  """Embeddings, L encoder layers and the [CLS] pooler (Hugging Face's `BertModel`)."""
  config: ModelConfig

  def setup(self):
    c = self.config
    self.embeddings = Embeddings(c)
    layer_cls = EncoderLayer
    if c.remat != 'none':
      layer_cls = nn.remat(EncoderLayer, policy=_REMAT_POLICIES[c.remat],
                           static_argnums=(3,))
    # Cross-layer parameters (MASA's dictionary) belong to the encoder and are handed to
    # every layer; a variant that needs them registers a `shared_params` factory.
    factory = getattr(attention_lib.VARIANTS[c.attention], 'shared_params', None)
    self.shared = factory(c, name='shared_attention') if factory else None
    if c.scan_layers:  # bert/layers/..., each parameter [L, ...] (stack_layers converts).
      self.layers = scanned_layers(c)(c, name='layers')
    else:
      self.layers = [layer_cls(c, i, name=f'layer_{i}') for i in range(c.num_layers)]
    if c.pre_layer_norm:
      self.final_norm = layer_norm(c, 'final_norm')
    self.pooler = dense(c, c.hidden_size, ('embed', None), 'pooler')

  def __call__(self, input_ids, segment_ids, input_mask, *, deterministic: bool = True,
               return_hidden_states: bool = False):
    """The encoder on a batch.

    Args:
      input_ids, segment_ids: [B, T] int32.
      input_mask: [B, T], 1 for real tokens and 0 for padding.
      deterministic: no dropout (evaluation).
      return_hidden_states: also return every layer's output.
    Returns:
      {'sequence_output': [B, T, D], 'pooled_output': [B, D]} and, when asked,
      'hidden_states': L + 1 arrays [B, T, D] (the embeddings' output first).
    """
    x = self.embeddings(input_ids, segment_ids, deterministic=deterministic)
    x = nn.with_logical_constraint(x, ('batch', 'length', 'embed'))
    mask = input_mask.astype(bool)[:, None, None, :]      # [B,1,1,S]: keys that are real
    if self.config.causal:                                  # [B,1,T,S]: and not ahead
      length = input_ids.shape[1]
      mask = mask & jnp.tril(jnp.ones((length, length), bool))[None, None]
    shared = self.shared() if self.shared is not None else None
    hidden_states = [x]
    if self.config.scan_layers:
      x, stacked = self.layers(x, jnp.arange(self.config.num_layers), mask, shared,
                               deterministic, return_hidden_states)
      if return_hidden_states:
        hidden_states += list(stacked)
    else:
      for layer in self.layers:
        x = layer(x, mask, deterministic, shared)
        hidden_states.append(x)
    if self.config.pre_layer_norm:
      x = self.final_norm(x)
      hidden_states[-1] = x
    pooled = jnp.tanh(self.pooler(x[:, 0]))
    out = {'sequence_output': x, 'pooled_output': pooled}
    if return_hidden_states:
      out['hidden_states'] = tuple(hidden_states)
    return out

  def attend(self, x):
    """Logits over the vocabulary: `x` times the word embedding (the tied MLM decoder)."""
    return self.embeddings.attend(x)


def gather_positions(x, positions):
  """The rows of `x` at `positions` (BERT's `gather_indexes`).

  Args:
    x: [B, T, D] hidden states.
    positions: [B, P] int32 indices into T.
  Returns:
    [B, P, D].
  """
  return jnp.take_along_axis(x, positions[..., None], axis=1)


class MLMHead(nn.Module):
  """Transform (dense, GELU, LayerNorm), then the tied vocabulary projection plus a bias."""
  config: ModelConfig

  @nn.compact
  def __call__(self, h, attend):
    c = self.config
    h = dense(c, c.hidden_size, ('embed', None), 'transform')(h)
    h = gelu(h)
    h = layer_norm(c, 'transform_norm')(h)
    bias = self.param('output_bias', zeros_init(('vocab',)), (c.vocab_size,), c.param_dtype)
    return attend(h).astype(jnp.float32) + bias


class BertForPretraining(nn.Module):
  """Masked-LM pretraining: logits only at the masked positions."""
  config: ModelConfig

  def setup(self):
    self.bert = BertEncoder(self.config)
    self.mlm_head = MLMHead(self.config)

  def __call__(self, input_ids, segment_ids, input_mask, masked_positions, *,
               deterministic: bool = True, return_hidden_states: bool = False):
    out = self.bert(input_ids, segment_ids, input_mask, deterministic=deterministic,
                    return_hidden_states=return_hidden_states)
    # Gather first: the vocabulary projection runs on B*P rows, not B*T.
    h = gather_positions(out['sequence_output'], masked_positions)
    out['mlm_logits'] = self.mlm_head(h, self.bert.attend)
    return out


POOLINGS = ('cls', 'mean')


class BertForSequenceClassification(nn.Module):
  """GLUE head: dropout, then a dense layer (1 unit: regression), on a pooled sequence.

  pooling 'cls': BERT's pooler (dense + tanh on [CLS]). 'mean': the mean of the last
  layer's outputs over the real tokens. An encoder pretrained by MLM alone never trains
  its [CLS] output or its pooler (no next-sentence task); the mean pools outputs that MLM
  did train.
  """
  config: ModelConfig
  num_labels: int
  pooling: str = 'cls'

  @nn.compact
  def __call__(self, input_ids, segment_ids, input_mask, *, deterministic: bool = True):
    out = BertEncoder(self.config, name='bert')(input_ids, segment_ids, input_mask,
                                                 deterministic=deterministic)
    if self.pooling == 'mean':
      mask = input_mask.astype(out['sequence_output'].dtype)[:, :, None]
      pooled = jnp.sum(out['sequence_output'] * mask, axis=1) / jnp.maximum(
          jnp.sum(mask, axis=1), 1.0)
    elif self.pooling == 'cls':
      pooled = out['pooled_output']
    else:
      raise ValueError(f'pooling must be one of {POOLINGS}, not {self.pooling!r}')
    h = Dropout(self.config.dropout_rate)(pooled, deterministic=deterministic)
    return dense(self.config, self.num_labels, ('embed', None), 'classifier')(h).astype(
        jnp.float32)
