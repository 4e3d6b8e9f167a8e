"""Self-attention variants behind one interface.

Every variant is a Linen module called as `attn(x, mask, deterministic=...)` with
x: [B, T, D] and mask: [B, 1, 1, T] (True where a key may be attended to), and returns
[B, T, D]. A variant only decides how queries, keys and values (and optionally a per-head
transform of the queries) are computed; the scaled dot-product, softmax and the output
projection W_o are shared by all of them (`AttentionCore`, `output_projection`).

Variants (docs/design.md defines each exactly):
  standard  Q = xW_q+b_q, K = xW_k+b_k, V = xW_v+b_v (BERT).
  shared    S = xW_s+b_s; Q, K, V = S*d_q, S*d_k, S*d_v (Kowsher et al., arXiv 2412.00359).
            One matrix product instead of three. The score matrix S diag(d_q*d_k) S^T is
            symmetric for any parameter values, which is why it is compared to `symmetric`.
  symmetric K = Q = xW_q+b_q; V standard (Courtois et al., arXiv 2406.06366).
  pairwise  Q as in symmetric; score_h = Q_h P_h Q_h^T / sqrt(H) with a full H x H matrix P_h
            per head, initialised N(0, 1) as in Courtois et al.'s code. Runs through the
            shared core with Q_h P_h as the query and Q_h as the key.
  partial_qk  per head, the first floor(rho*H) columns of Q_h and K_h come from one shared
            projection ('query_key'), the rest from private ones (Yang et al., ENLSP 2024);
            rho = model.qk_shared_fraction; rho=0 is `standard`, rho=1 is `symmetric`.
  kv_shared K = V = xW_kv+b_kv; Q = xW_q+b_q (Kayyam et al., arXiv 2606.04032, "Q-K=V"): the
            scores stay asymmetric; keys and values are one tensor.
  single    Q = K = V = xW+b, no diagonals (Kayyam et al.'s "Q=K=V"): `shared` minus
            `single` is what the three diagonals add.
  q_identity  Q = x split into heads (no query parameters); K, V standard (Karbevski,
            arXiv 2510.23912, "W_Q = I").
  masa      for each projection type t in model.masa_projections (a subset of q, k, v, o):
            S = model.masa_atoms atoms A_t,s (0: ceil(L/3)) shared by all layers and coefficients
            c_t[l, s]; layer l uses W = sum_s c_t[l, s] A_t,s (Zhussip et al., arXiv
            2508.04581). The dictionary belongs to the encoder (`MasaDictionary`, under
            bert/shared_attention) and reaches every layer as `shared`; biases stay per layer.
            Its classes are in sharedbert/models/masa.py (registered when sharedbert.models
            is imported).

Axis letters in the einsums: B batch, T/S query/key length, D model width, N heads,
H head width, G a second head-width axis, C the three roles (q, k, v), A atoms.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from sharedbert.config import validation
from sharedbert.errors import UserError
from sharedbert.models.attend import attend, attention_logits, self_attention_share
from sharedbert.models import fit as fit_lib
from sharedbert.models import rotary
from sharedbert.models.layers import HeadsProjection, matmul, output_projection


Dtype = Any

# Registry: variant name -> module class. Other modules add to it with `register`.
VARIANTS: dict[str, type[nn.Module]] = {}


def setting_names() -> set[str]:
  """The names of every registered variant's own settings.

  Returns:
    A set of names.
  """
  return {name for cls in VARIANTS.values() for name in cls.settings}


def register(name: str):
  """A class decorator that adds an attention variant to VARIANTS under `name`.

  Args:
    name: the name configs give it (model.attention).
  Returns:
    The decorator, which returns the class unchanged.
  """
  def wrap(cls):
    VARIANTS[name] = cls
    return cls
  return wrap


class AttentionBase(nn.Module):
  """Common plumbing: subclasses implement `qkv(x) -> (q, k, v)`, each [B,T,N,H].

  A subclass may also override `output_kernel` (W_o from elsewhere), `check_config`
  (validate its settings) and set `shared_params`, a module factory whose output the
  encoder computes once per forward pass and hands to every layer as `shared=`.

  Everything else the code base needs to know about a variant is asked of its class, so
  that a new variant is one class and one config file (docs/variants.md, "Adding a variant"):
    param_formula   closed-form parameter counts, checked against the tree by
                    sharedbert.models.params
    qkv_flops       its input projections' FLOPs (sharedbert.models.flops)
    dense_projections  instead of the two above, for a variant whose Q, K, V come from that
                    many D x D projections with biases and nothing else
    extra_flops     FLOPs that do not scale with the batch (masa's kernels)
    settings        its own model settings with their defaults ({name: default}): config
                    files set them as model.<name>, ModelConfig reads them as attributes
    setting_ranges  their valid ranges (checked before `check_config`)
    config_keys     its own model settings that change the parameter tree (a resumed run
                    must match them); `resolved_settings` gives their effective values
    export_as       the equivalent model transformers can load, when it is another
                    variant's (a setting folded into the weights)
    settings_text   those settings in a few characters (reports)
    paper_figures   what its paper states at BERT-base (parameter report)
    from_standard   the conversion hook of sharedbert.convert.shared
    output_names    names, in the layer or the shared params, of W_o's parameters
    scannable       whether it runs under model.scan_layers (a traced layer_index)
  """
  config: Any  # sharedbert.models.bert.ModelConfig
  # The layer's position in the stack: an int, or a traced scalar under model.scan_layers.
  layer_index: Any = 0

  config_keys: tuple[str, ...] = ()
  # The variant's own settings and their defaults: model.<name> in a config (ModelConfig).
  settings: ClassVar[dict[str, Any]] = {}
  # The valid range of each of them (sharedbert.config.validation's Ranges), checked by
  # ModelConfig.validate before `check_config`.
  setting_ranges: ClassVar[dict[str, Any]] = {}
  # (source, {'qkv'|'attention'|'total': reduction in percent}, total as stated, or None).
  paper_figures: tuple | None = None
  output_names: tuple[str, ...] = ('out',)
  # False: the class needs layer_index as a Python int, so model.scan_layers (which hands it
  # a traced index) is refused for it.
  scannable: bool = True
  # True: `qkv` returns queries already multiplied by 1/sqrt(H).
  query_scaled: ClassVar[bool] = False
  # True: every head's score is s(x, y) = M[x, y] + g[x] + h[y] with M symmetric (Q and K
  # from one projection up to a diagonal), the form the probes' `cyclic` task bounds.
  symmetric_scores: ClassVar[bool] = False
  # True: the queries are the keys, Q = K exactly (symmetric, single): the score matrix stays
  # symmetric under rotary positions without a query phase (symmetric_score_matrix).
  queries_are_keys: ClassVar[bool] = False
  # A variant whose Q, K, V come from this many D x D projections with biases (and nothing
  # else) gets its closed form and FLOP count from it; None: it defines its own.
  dense_projections: ClassVar[int | None] = None

  @classmethod
  def symmetric_score_matrix(cls, config) -> bool:
    """Whether every head's score matrix is symmetric under `config`'s positions: the
    variant's `symmetric_scores` with a learned table or none; under rotary positions only
    Q = K with no query phase (q_i^T R(j-i) q_j = q_j^T R(i-j) q_i), as the rotation
    between shared's diagonals makes its scores asymmetric (docs/variants.md, Positions)."""
    if getattr(config, 'position_embeddings', 'learned') != 'rotary':
      return cls.symmetric_scores
    return cls.queries_are_keys and getattr(config, 'rope_query_phase', 0.0) == 0.0

  @classmethod
  def check_config(cls, config) -> None:
    """Raises UserError for settings this variant cannot use."""

  @classmethod
  def param_formula(cls, config) -> tuple[int, int] | None:
    """(attention QKV, attention output) parameters of the whole stack, in closed form
    (docs/design.md's table); None: no closed form, the report only counts the tree."""
    if cls.dense_projections is None:
      return None
    return (config.num_layers * cls.dense_projections * _dense(config),
            config.num_layers * _dense(config))

  @classmethod
  def qkv_flops(cls, config) -> tuple[list[int], int]:
    """Output widths of one layer's input projections, and extra per-token FLOPs.

    Each width w means one [tokens, D] x [D, w] product; the extra term holds per-token
    products that are not projections of x (pairwise's Q_h P_h).
    """
    if cls.dense_projections is not None:
      return [config.hidden_size] * cls.dense_projections, 0
    raise UserError(f'sharedbert.models.flops has no FLOP count for the attention variant '
                    f'{config.attention!r}; define qkv_flops on its class')

  @classmethod
  def extra_flops(cls, config) -> dict[str, int]:
    """Forward FLOPs per step that do not depend on the batch, by name."""
    return {}

  @classmethod
  def resolved_settings(cls, model: dict) -> dict:
    """The effective values of `config_keys` in a model config dict (keys it lacks are left
    out): what a checkpoint's model must share with a config that resumes it."""
    return {k: model[k] for k in cls.config_keys if k in model}

  @classmethod
  def export_as(cls, config, params):
    """(model config, params) of the model the exporter writes: by default this one. A
    variant that equals another with its own setting folded into the weights returns that
    one, which transformers may load without custom code."""
    return config, params

  @classmethod
  def settings_text(cls, config) -> str:
    """The variant's settings for the parameter report ('' when it has none)."""
    return ''

  @classmethod
  def paper_applies(cls, config) -> bool:
    """Whether `paper_figures` are for this setting (the size is checked by the caller)."""
    return True

  # The fits `from_standard` offers (`convert_shared --fit`); the first is the default.
  conversion_fits: tuple[str, ...] = ()
  # Those of them that take the inputs' second moments (`convert_shared --fit_text`).
  weighted_fits: tuple[str, ...] = ()

  @classmethod
  def conversion_fit(cls, fit: str | None, moments=None) -> str:
    """`fit`, or the default one, checked against the variant's fits (and, with
    `moments`, that it is one weighted by them: 'function')."""
    if fit is None:
      fit = cls.conversion_fits[0] if cls.conversion_fits else ''
    elif fit not in cls.conversion_fits:
      raise UserError(f'--fit={fit!r}: the {cls.__name__} conversion offers '
                      f'{", ".join(cls.conversion_fits) or "no choice of fit"}')
    if moments is not None and fit not in cls.weighted_fits:
      weighted = sorted(f'{name} --fit={f}' for name, v in VARIANTS.items()
                        for f in v.weighted_fits)
      raise UserError(f'--fit_text weights only the fits {", ".join(weighted)}, not '
                      f'{cls.__name__} --fit={fit}')
    return fit

  @classmethod
  def from_standard(cls, layers: list[dict], config, fit: str | None = None, moments=None):
    """standard layers' attention params (NumPy) -> a `fit_lib.Conversion`, by the named fit;
    `moments` (the inputs' second moment per layer, on real text) weight the fits that
    take them ('function'), and are refused by the others."""
    raise UserError(f'cannot convert to {config.attention!r}; the variant has no conversion '
                    'from standard (from_standard)')

  @property
  def head_dim(self) -> int:
    return self.config.hidden_size // self.config.num_heads

  def projection(self, name: str, head_dim: int | None = None):
    """A per-head projection [D] -> [N, head_dim] named `name`, with this layer's init and
    axes."""
    c = self.config
    return HeadsProjection(c.num_heads, head_dim or self.head_dim, c.initializer_range,
                           c.dtype, c.param_dtype, name=name)

  def qkv(self, x, **kwargs):
    """(q, k, v), each [B,T,N,H]; or (q, k, v', scale [N,H]) for V = v' * scale."""
    raise NotImplementedError

  def output_kernel(self, **kwargs):
    """W_o's kernel [N,H,D] when it comes from outside the layer; None: the layer's own."""
    return None

  @property
  def rotary(self) -> bool:
    """Whether queries and keys are rotated by their positions (model.position_embeddings)."""
    return self.config.position_embeddings == 'rotary'

  @nn.compact
  def __call__(self, x, mask, *, deterministic: bool, **kwargs):
    """x [B,T,D], mask [B,1,1 or T,T] (True: the key may be seen) -> [B,T,D].

    Rotary positions turn the queries and keys that `qkv` returns, at the point where the
    scores are formed, before either attention path (einsum or fused)."""
    c = self.config
    q, k, v, *value_scale = self.qkv(x, **kwargs)
    if self.rotary:
      q, k = rotary.apply(q, k, theta=c.rope_theta, query_phase=c.rope_query_phase)
    if self.is_mutable_collection('intermediates'):
      self.sow('intermediates', 'self_attention_share',
               self_attention_share(q, k, mask, query_scaled=self.query_scaled))
    if self.is_mutable_collection('attention_logits'):  # The probes' pointer readout.
      self.sow('attention_logits', 'logits',
               attention_logits(q, k, mask, query_scaled=self.query_scaled))
    rng = (lambda: self.make_rng('dropout')) if not deterministic else None
    out = attend(q, k, v, mask, dropout_rate=c.attention_dropout_rate,
                 deterministic=deterministic, dtype=c.dtype, impl=c.attention_impl,
                 dropout_rng=rng, query_scaled=self.query_scaled)
    out = nn.with_logical_constraint(out, ('batch', 'length', 'heads', 'kv'))
    # V = V' diag(scale): (P V') diag(scale) W_o, with diag(scale) folded into W_o.
    return output_projection(self, out, c.hidden_size, kernel=self.output_kernel(**kwargs),
                             input_scale=value_scale[0] if value_scale else None)


def _dense(config) -> int:
  """A D x D projection with its bias."""
  return config.hidden_size * (config.hidden_size + 1)


@register('standard')
class StandardAttention(AttentionBase):
  """BERT: three independent projections."""
  dense_projections = 3

  def qkv(self, x, **kwargs):
    return self.projection('query')(x), self.projection('key')(x), self.projection('value')(x)


def diag_initializer(scheme: str, value: float):
  """shared's [3, N, H] diagonals (d_q, d_k, d_v) at initialisation (model.diag_init_scheme):
  'signs' (the default): d_q and d_k each +-value at random, so the initial scores
  S diag(d_q*d_k) S^T are indefinite; 'constant': all `value`, so they are positive
  semi-definite like `single`'s, and a token attends mostly to itself at step 0; 'normal':
  d_q, d_k ~ N(0, 1). d_v is `value` in every scheme. Kowsher et al. (arXiv 2412.00359) do
  not specify the diagonals' initialisation; the default is the cpu study's best
  (docs/study_cpu/report.md).

  Args:
    scheme: 'signs', 'constant' or 'normal'.
    value: diag_init.
  Returns:
    A flax initializer (key, shape [3, N, H], dtype) -> array.
  """
  def init(key, shape, dtype=jnp.float32):
    if scheme == 'constant':
      return jnp.full(shape, value, dtype)
    if scheme == 'signs':
      qk = value * jax.random.rademacher(key, (2,) + tuple(shape[1:]), dtype)
    elif scheme == 'normal':
      qk = jax.random.normal(key, (2,) + tuple(shape[1:]), dtype)
    else:  # ModelConfig.validate refuses other schemes first.
      raise ValueError(f'unknown diag_init_scheme {scheme!r}')
    return jnp.concatenate([qk, jnp.full((1,) + tuple(shape[1:]), value, dtype)])
  return init


# The diagonals' start, for the variants that have d_q and d_k (diag_initializer).
DIAG_SETTINGS = {'diag_init': 1.0, 'diag_init_scheme': 'signs'}
DIAG_RANGES = {'diag_init': validation.number(),
               'diag_init_scheme': validation.one_of('constant', 'signs', 'normal')}


@register('shared')
class SharedAttention(AttentionBase):
  """One projection S = xW_s + b_s; the roles are S scaled by per-layer diagonals."""
  query_scaled = True
  symmetric_scores = True  # Q K^T = S diag(d_q * d_k) S^T.
  settings = DIAG_SETTINGS
  setting_ranges = DIAG_RANGES
  paper_figures = ('Kowsher et al., arXiv 2412.00359', {'qkv': 66.53, 'total': 12.94}, '95.3M')

  @classmethod
  def param_formula(cls, config):
    d, layers = config.hidden_size, config.num_layers
    return layers * (_dense(config) + 3 * d), layers * _dense(config)

  @classmethod
  def qkv_flops(cls, config):
    return [config.hidden_size], 0

  # 'function': per head, the score form and the value path (fit_lib.fit_shared_function);
  # 'rank1': the weights, one rank-one fit per output unit (fit_lib.fit_shared).
  conversion_fits = ('function', 'rank1')
  weighted_fits = ('function',)

  @classmethod
  def from_standard(cls, layers, config, fit=None, moments=None):
    if cls.conversion_fit(fit, moments) == 'rank1':
      return fit_lib.per_layer_conversion(
          layers, fit_lib.fit_shared, ('qkv',) + fit_lib.ROLES,
          ['layer', 'Q,K,V together', 'query', 'key', 'value'],
          'W_s, b_s, d_q, d_k, d_v per layer (least squares on the weights, rank one per '
          'output unit)', 'weights and biases')
    return fit_lib.per_layer_conversion(
        layers, fit_lib.fit_shared_function, ('scores', 'values'),
        ['layer', 'scores [W_q;b_q][W_k;b_k]^T', 'value path W_v W_o'],
        'W_s, b_s, d_q, d_k, d_v, W_o per layer, fitted per head to the symmetrised score '
        'form and the value path' + (', weighted by the inputs on real text' if moments
                                     is not None else ''), 'attention maps', moments)

  def qkv(self, x, **kwargs):
    c = self.config
    s = self.projection('shared')(x)  # [B,T,N,H]: the only matrix product.
    # d_q, d_k, d_v stacked as [3, N, H].
    diag = self.param('diag', nn.with_logical_partitioning(
        diag_initializer(c.diag_init_scheme, c.diag_init), ('qkv', 'heads', 'kv')),
        (3, c.num_heads, self.head_dim), c.param_dtype).astype(c.dtype)
    # Exactly Q = S diag(d_q), K = S diag(d_k), V = S diag(d_v), regrouped so that only one
    # [B,T,N,H] tensor besides S is made: Q K^T / sqrt(H) = (S diag(d_q*d_k/sqrt(H))) S^T,
    # and P V W_o = (P S) diag(d_v) W_o, with diag(d_v) folded into W_o (`__call__`): the
    # diagonals touch [N,H] and [N,H,D] arrays, never an extra [B,T,N,H] one, which is what
    # makes `shared` cheaper than `standard` per step (docs/benchmarks.md).
    scale = jnp.asarray(1.0 / math.sqrt(self.head_dim), c.dtype)
    if self.rotary:
      # The rotation sits between the diagonals (s_i^T D_q R(j-i) D_k s_j), so d_q and d_k
      # no longer meet as one product: Q = S diag(d_q) / sqrt(H) and K = S diag(d_k) apart.
      return s * (diag[0] * scale), s * diag[1], s, diag[2]
    return s * (diag[0] * diag[1] * scale), s, s, diag[2]


@register('shared_qk')
class SharedQKAttention(AttentionBase):
  """Q = S diag(d_q), K = S diag(d_k) from one projection S = xW_s + b_s; V its own
  projection. `shared` with V untied: its scores S diag(d_q*d_k) S^T are symmetric but
  indefinite, as shared's, so beside `symmetric` (Q K^T = Q Q^T, positive semi-definite) and
  `shared` it separates score symmetry, self-favouring and tying V (docs/study.md)."""
  query_scaled = True
  symmetric_scores = True
  settings = DIAG_SETTINGS
  setting_ranges = DIAG_RANGES

  @classmethod
  def param_formula(cls, config):
    d, layers = config.hidden_size, config.num_layers
    return layers * (2 * _dense(config) + 2 * d), layers * _dense(config)

  @classmethod
  def qkv_flops(cls, config):
    return [config.hidden_size] * 2, 0

  def qkv(self, x, **kwargs):
    c = self.config
    s = self.projection('shared')(x)
    # d_q, d_k stacked as [2, N, H], drawn as shared's (model.diag_init_scheme).
    full = diag_initializer(c.diag_init_scheme, c.diag_init)
    diag = self.param('diag', nn.with_logical_partitioning(
        lambda key, shape, dtype=jnp.float32: full(key, (3,) + tuple(shape[1:]), dtype)[:2],
        ('qkv', 'heads', 'kv')), (2, c.num_heads, self.head_dim), c.param_dtype).astype(c.dtype)
    scale = jnp.asarray(1.0 / math.sqrt(self.head_dim), c.dtype)
    value = self.projection('value')(x)
    if self.rotary:  # The rotation sits between the diagonals, as in `shared`.
      return s * (diag[0] * scale), s * diag[1], value
    return s * (diag[0] * diag[1] * scale), s, value


@register('symmetric')
class SymmetricAttention(AttentionBase):
  """K = Q: one projection for queries and keys, so every head's score matrix is symmetric."""
  dense_projections = 2
  symmetric_scores = True
  queries_are_keys = True
  # 'function': the best positive semi-definite fit of each head's symmetrised score form
  # (fit_lib.fit_symmetric_function); 'mean': W_qk = (W_q + W_k) / 2. Values and W_o are kept.
  conversion_fits = ('function', 'mean')
  weighted_fits = ('function',)

  @classmethod
  def from_standard(cls, layers, config, fit=None, moments=None):
    if cls.conversion_fit(fit, moments) == 'mean':
      return fit_lib.per_layer_conversion(
          layers, fit_lib.fit_symmetric_mean, ('query', 'key'), ['layer', 'query', 'key'],
          'W_qk, b_qk = the mean of the query and key weights', 'kernels')
    return fit_lib.per_layer_conversion(
        layers, fit_lib.fit_symmetric_function, ('scores',),
        ['layer', 'scores [W_q;b_q][W_k;b_k]^T'],
        'W_qk, b_qk per layer, the top positive eigenpairs of each head\'s symmetrised score '
        'form (values kept)' + (', weighted by the inputs on real text' if moments is not None
                                else ''), 'attention maps', moments)

  def qkv(self, x, **kwargs):
    q = self.projection('query')(x)
    return q, q, self.projection('value')(x)


@register('pairwise')
class PairwiseAttention(AttentionBase):
  """Symmetric projections with a learned bilinear form per head: score = Q_h P_h Q_h^T."""
  paper_figures = ('Courtois et al., arXiv 2406.06366', {'total': 6.0}, None)
  # The std of P_h at init (Courtois et al.: 1; 1/sqrt(H) keeps standard's score scale).
  settings = {'pairwise_init_std': 1.0}
  setting_ranges = {'pairwise_init_std': validation.number(0, low_open=True)}

  @classmethod
  def param_formula(cls, config):
    n, h = config.num_heads, config.hidden_size // config.num_heads
    return (config.num_layers * (2 * _dense(config) + n * h * h),
            config.num_layers * _dense(config))

  @classmethod
  def qkv_flops(cls, config):
    h = config.hidden_size // config.num_heads
    # Q_h [1, H] x P_h [H, H] per head and token.
    return [config.hidden_size] * 2, config.num_heads * matmul(1, h, h)

  def qkv(self, x, **kwargs):
    c = self.config
    q = self.projection('query')(x)
    # P_h is unconstrained (not symmetric); N(0, 1) at init as in Courtois et al.'s code
    # (model.pairwise_init_std; 1/sqrt(H) keeps the initial scores at standard's scale).
    pairwise = self.param('pairwise', nn.with_logical_partitioning(
        nn.initializers.normal(c.pairwise_init_std), ('heads', 'kv', None)),
        (c.num_heads, self.head_dim, self.head_dim), c.param_dtype)
    # Under rotary positions the rotation comes after P_h (the query is Q_h P_h, the key Q_h):
    # the score (Q_h,i P_h) R(j-i) Q_h,j^T still depends on positions only through j - i.
    # Rotated before P_h it would not, as P_h does not commute with the rotations.
    paired = jnp.einsum('BTNH,NHG->BTNG', q, pairwise.astype(c.dtype))
    return paired, q, self.projection('value')(x)


@register('kv_shared')
class KVSharedAttention(AttentionBase):
  """Keys and values from one projection ('key_value'); queries their own. The score
  matrix x W_q W_kv^T x^T is not symmetric, unlike `symmetric`'s and `shared`'s."""
  dense_projections = 2

  conversion_fits = ('function',)

  @classmethod
  def from_standard(cls, layers, config, fit=None, moments=None):
    cls.conversion_fit(fit, moments)
    return fit_lib.per_layer_conversion(
        layers, fit_lib.fit_kv_shared, ('scores', 'values'),
        ['layer', 'scores [W_q;b_q] W_k^T', 'value path W_v W_o'],
        'W_q, b_q, W_kv and W_o per layer, fitted to what attention computes (per head: the '
        'score form and the value path)', 'attention maps')

  def qkv(self, x, **kwargs):
    kv = self.projection('key_value')(x)
    return self.projection('query')(x), kv, kv


@register('single')
class SingleAttention(AttentionBase):
  """Q = K = V = xW + b: one projection and nothing else; `shared` with its diagonals at 1.
  Every head's score matrix is symmetric and positive semi-definite."""
  dense_projections = 1
  symmetric_scores = True
  queries_are_keys = True

  def qkv(self, x, **kwargs):
    s = self.projection('shared')(x)  # The name `shared` uses: a `shared` tree minus 'diag'.
    return s, s, s


@register('q_identity')
class QueryIdentityAttention(AttentionBase):
  """Q = x, split into heads as K and V are; no query parameters (W_q = I, b_q = 0)."""
  dense_projections = 2

  def qkv(self, x, **kwargs):
    c = self.config
    q = x.astype(c.dtype).reshape(*x.shape[:-1], c.num_heads, self.head_dim)
    q = nn.with_logical_constraint(q, ('batch', 'length', 'heads', 'kv'))
    return q, self.projection('key')(x), self.projection('value')(x)
