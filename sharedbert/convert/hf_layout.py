"""The map between Hugging Face and sharedbert's `standard` variant, without I/O: model
configs both ways (`model_config_from_hf`, `hf_config_from_model`) and parameter trees both
ways (`params_from_hf`, `hf_from_params`), one table of tensor names (`_mapping`).
sharedbert.convert.hf reads and writes the files.

Post-LN models are BERT (`BertForMaskedLM`, model_type "bert"). Pre-LN models (the budget
recipe's) are `RobertaPreLayerNormForMaskedLM` (model_type "roberta-prelayernorm", built into
transformers): the same blocks with LayerNorm before attention (`attention.LayerNorm`) and
before the FFN (`intermediate.LayerNorm`), one after the last layer
(`roberta_prelayernorm.LayerNorm`) and after the embeddings, as sharedbert's pre-LN model.
RoBERTa numbers positions from pad_token_id + 1 (a token's position is the count of
non-padding tokens up to it, plus pad_token_id), so its position table has pad_token_id + 1
rows in front of ours: with sharedbert's [PAD] = 0, one row (zeros; only padding reads it).

Post-LN models with rotary positions (θ = 10,000, no query phase, bidirectional) are
RoFormer (`RoFormerForMaskedLM`, model_type "roformer", Su et al. 2021): BERT's blocks with
no position table, queries and keys turned by positions in adjacent column pairs with
w_p = 10000^(-2p/H), exactly as sharedbert.models.rotary does. RoFormer has no pooler (an
import initialises it; an export leaves it out) and its sequence classifier has a head of
its own (dense, GELU, dense), so a fine-tuned rotary classifier exports as custom code."""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from sharedbert.errors import UserError
from sharedbert.models.bert import BertForPretraining, ModelConfig

Params = dict[str, Any]

# The two layouts: model_type -> (the encoder's prefix, architecture of the MLM model).
BERT, PRE_LN, ROFORMER = 'bert', 'roberta-prelayernorm', 'roformer'
PREFIX = {BERT: 'bert', PRE_LN: 'roberta_prelayernorm', ROFORMER: 'roformer'}
MLM_ARCHITECTURE = {BERT: 'BertForMaskedLM', PRE_LN: 'RobertaPreLayerNormForMaskedLM',
                    ROFORMER: 'RoFormerForMaskedLM'}
# RoFormer's only base: the one its sinusoidal table is built with.
ROFORMER_THETA = 10000.0
# sharedbert's [PAD] id (data/tokenizer.py); RoBERTa's positions start after it.
PAD_ID = 0

# Tensors a Hugging Face checkpoint may hold that have no counterpart here.
_IGNORED_PREFIXES = ('cls.seq_relationship.', 'classifier.', 'qa_outputs.')
_IGNORED_KEYS = tuple(f'{p}.embeddings.{n}' for p in PREFIX.values()
                      for n in ('position_ids', 'token_type_ids')) + (
                          # RoFormer's fixed sinusoid table (a buffer; rotary recomputes it).
                          'roformer.encoder.embed_positions.weight',)


def model_type(cfg: ModelConfig) -> str:
  """The transformers family of `cfg`: 'roformer' (rotary positions), 'roberta-prelayernorm'
  (pre-LN) or 'bert'.

  Args:
    cfg: a `standard` ModelConfig.
  Returns:
    The model_type.
  """
  if cfg.position_embeddings == 'rotary':
    return ROFORMER
  return PRE_LN if cfg.pre_layer_norm else BERT


def position_offset(hf: dict) -> int:
  """Rows of a Hugging Face position table in front of sharedbert's (RoBERTa's padding
  offset; none for BERT).

  Args:
    hf: config.json as a dict.
  Returns:
    The offset (RoBERTa: pad_token_id + 1).
  """
  return int(hf.get('pad_token_id', 1)) + 1 if hf.get('model_type') == PRE_LN else 0

# The model settings a Hugging Face config decides.
ARCHITECTURE_KEYS = ('attention', 'vocab_size', 'hidden_size', 'num_layers', 'num_heads',
                     'mlp_dim', 'max_position_embeddings', 'type_vocab_size', 'dropout_rate',
                     'attention_dropout_rate', 'initializer_range', 'layer_norm_eps',
                     'pre_layer_norm', 'position_embeddings')


# ---------------------------------------------------------------------------------------
# Configs.

def model_config_from_hf(hf: dict, where: str = 'config.json') -> ModelConfig:
  """The `standard` ModelConfig of a Hugging Face BertConfig or RobertaPreLayerNormConfig
  (as a dict).

  Args:
    hf: config.json as a dict.
    where: how errors name the file.
  Returns:
    The ModelConfig.
  Raises:
    UserError: a layout sharedbert does not compute.
  """
  if not isinstance(hf, dict):
    raise UserError(f'{where} holds a JSON {type(hf).__name__}, not an object; is it a BERT '
                    'config.json?')
  kind = hf.get('model_type', BERT)
  if kind not in PREFIX:
    raise UserError(f'{where}: model_type is {kind!r}, not "bert" (post-LN), '
                    '"roberta-prelayernorm" (pre-LN) or "roformer" (rotary)')
  width = hf.get('hidden_size')
  if kind == ROFORMER and (hf.get('rotary_value') or hf.get('embedding_size', width) != width):
    raise UserError(f'{where}: a RoFormer with rotary_value=true or an embedding_size other '
                    'than hidden_size is not supported (sharedbert rotates queries and keys '
                    'only, and embeds at the model width)')
  if hf.get('hidden_act', 'gelu') != 'gelu':
    raise UserError(f'{where}: hidden_act is {hf["hidden_act"]!r}; sharedbert uses BERT\'s '
                    'exact (erf) "gelu" only')
  if hf.get('position_embedding_type', 'absolute') != 'absolute':
    raise UserError(f'{where}: position_embedding_type {hf["position_embedding_type"]!r} is '
                    'not supported (only "absolute")')
  if hf.get('is_decoder') or hf.get('add_cross_attention'):
    raise UserError(f'{where}: a decoder BERT (is_decoder / add_cross_attention) is not supported')
  if not hf.get('tie_word_embeddings', True):
    raise UserError(f'{where}: tie_word_embeddings is false; sharedbert ties the MLM decoder '
                    'to the word embeddings')
  try:
    cfg = ModelConfig(
        attention='standard', vocab_size=int(hf['vocab_size']),
        hidden_size=int(hf['hidden_size']), num_layers=int(hf['num_hidden_layers']),
        num_heads=int(hf['num_attention_heads']), mlp_dim=int(hf['intermediate_size']),
        max_position_embeddings=int(hf['max_position_embeddings']) - position_offset(hf),
        type_vocab_size=int(hf['type_vocab_size']),
        dropout_rate=float(hf.get('hidden_dropout_prob', 0.1)),
        attention_dropout_rate=float(hf.get('attention_probs_dropout_prob', 0.1)),
        initializer_range=float(hf.get('initializer_range', 0.02)),
        layer_norm_eps=float(hf.get('layer_norm_eps', 1e-12)), pre_layer_norm=kind == PRE_LN,
        position_embeddings='rotary' if kind == ROFORMER else 'learned')
  except KeyError as e:
    raise UserError(f'{where} has no {e.args[0]!r}; is it a BERT config?') from e
  except (TypeError, ValueError) as e:
    raise UserError(f'{where}: a size or rate is not a number ({e})') from e
  try:
    cfg.validate()
  except UserError as e:  # Named as the ModelConfig field; say which file it came from.
    raise UserError(f'{where}: {e}') from e
  return cfg


def hf_config_from_model(cfg: ModelConfig) -> dict:
  """The config.json of BertForMaskedLM (post-LN) or RobertaPreLayerNormForMaskedLM (pre-LN)
  for a `standard` model.

  Args:
    cfg: a `standard` ModelConfig.
  Returns:
    config.json as a dict.
  """
  if cfg.attention != 'standard':
    raise UserError(f'only standard models map onto Hugging Face BERT (post-LN) or '
                    f'RoBERTa-PreLayerNorm (pre-LN); this one is {cfg.attention!r} (convert a '
                    'standard checkpoint, or keep it in sharedbert)')
  # Neither Hugging Face layout holds these: an export would compute another function.
  if cfg.causal:
    raise UserError('this model was trained with model.causal=True (each token sees only '
                    'those before it); Hugging Face BERT and RoBERTa-PreLayerNorm attend both '
                    'ways, so the export would compute something else: keep it in sharedbert')
  if cfg.position_embeddings == 'rotary':
    if cfg.pre_layer_norm or cfg.rope_theta != ROFORMER_THETA or cfg.rope_query_phase:
      raise UserError('transformers\' rotary BERT (RoFormer) is post-LN with theta 10,000 and '
                      f'no query phase; this model has pre_layer_norm={cfg.pre_layer_norm}, '
                      f'rope_theta={cfg.rope_theta:g}, rope_query_phase='
                      f'{cfg.rope_query_phase:g}: export it as custom code')
  elif cfg.position_embeddings != 'learned':
    raise UserError(f'this model has no position table (model.position_embeddings='
                    f'{cfg.position_embeddings}); '
                    'Hugging Face BERT and RoBERTa-PreLayerNorm always add them, so the export '
                    'would compute something else: keep it in sharedbert')
  kind = model_type(cfg)
  out = {
      'architectures': [MLM_ARCHITECTURE[kind]], 'model_type': kind,
      'vocab_size': cfg.vocab_size, 'hidden_size': cfg.hidden_size,
      'num_hidden_layers': cfg.num_layers, 'num_attention_heads': cfg.num_heads,
      'intermediate_size': cfg.mlp_dim, 'hidden_act': 'gelu',
      'hidden_dropout_prob': cfg.dropout_rate,
      'attention_probs_dropout_prob': cfg.attention_dropout_rate,
      'max_position_embeddings': cfg.max_position_embeddings,
      'type_vocab_size': cfg.type_vocab_size, 'initializer_range': cfg.initializer_range,
      'layer_norm_eps': cfg.layer_norm_eps, 'position_embedding_type': 'absolute',
      'pad_token_id': PAD_ID, 'tie_word_embeddings': True, 'dtype': 'float32',
  }
  if kind == ROFORMER:
    del out['position_embedding_type']
    out.update(embedding_size=cfg.hidden_size, rotary_value=False)
  if kind == PRE_LN:
    # [CLS] and [SEP] (data/tokenizer.py) as RoBERTa's <s> and </s>; the padding offset.
    out.update(bos_token_id=2, eos_token_id=3,
               max_position_embeddings=cfg.max_position_embeddings + PAD_ID + 1)
  return out


# ---------------------------------------------------------------------------------------
# The tensor mapping.

class _Entry:
  """One parameter: our path, the Hugging Face key, and the layout changes both ways."""

  def __init__(self, path: tuple[str, ...], key: str, group: str,
               to_ours: Callable = lambda x: x, to_hf: Callable = lambda x: x):
    self.path, self.key, self.group, self.to_ours, self.to_hf = path, key, group, to_ours, to_hf


def _mapping(cfg: ModelConfig) -> list[_Entry]:
  """Every parameter of BertForPretraining(standard) and its Hugging Face tensor."""
  d, n = cfg.hidden_size, cfg.num_heads
  h = d // n
  pre_ln = cfg.pre_layer_norm
  base = PREFIX[model_type(cfg)]
  offset = PAD_ID + 1 if pre_ln else 0
  entries = []

  def add(path, key, group='encoder', **fns):
    entries.append(_Entry(tuple(path.split('/')), key, group, **fns))

  def linear(path, key, group='encoder', in_shape=None, out_shape=None):
    """torch Linear weight [out, in] <-> our kernel [in..., out...]; bias [out] <-> [out...]."""
    def kernel_to_ours(w):
      w = w.T
      return w.reshape(*(in_shape or (w.shape[0],)), *(out_shape or (w.shape[1],)))

    def kernel_to_hf(k):
      fan_in = int(np.prod(in_shape)) if in_shape else k.shape[0]
      return k.reshape(fan_in, -1).T

    add(f'{path}/kernel', f'{key}.weight', group, to_ours=kernel_to_ours, to_hf=kernel_to_hf)
    add(f'{path}/bias', f'{key}.bias', group,
        to_ours=(lambda b: b.reshape(out_shape)) if out_shape else (lambda b: b),
        to_hf=lambda b: b.reshape(-1))

  def norm(path, key, group='encoder'):
    add(f'{path}/scale', f'{key}.weight', group)
    add(f'{path}/bias', f'{key}.bias', group)

  for name in ('word', 'token_type'):
    add(f'bert/embeddings/{name}_embeddings/embedding',
        f'{base}.embeddings.{name}_embeddings.weight')
  # RoBERTa's rows in front of ours (padding only): zeros on export, dropped on import.
  if cfg.position_embeddings == 'learned':
    add('bert/embeddings/position_embeddings/embedding',
        f'{base}.embeddings.position_embeddings.weight',
        to_ours=lambda t: t[offset:], to_hf=lambda t: np.concatenate(
            [np.zeros((offset, t.shape[1]), t.dtype), t]))
  norm('bert/embeddings/LayerNorm', f'{base}.embeddings.LayerNorm')
  for i in range(cfg.num_layers):
    ours, hf = f'bert/layer_{i}', f'{base}.encoder.layer.{i}'
    for role in ('query', 'key', 'value'):
      linear(f'{ours}/attention/{role}', f'{hf}.attention.self.{role}', out_shape=(n, h))
    linear(f'{ours}/attention/out', f'{hf}.attention.output.dense', in_shape=(n, h))
    linear(f'{ours}/mlp/intermediate', f'{hf}.intermediate.dense')
    linear(f'{ours}/mlp/output', f'{hf}.output.dense')
    if pre_ln:  # Before attention and before the FFN.
      norm(f'{ours}/attention_norm', f'{hf}.attention.LayerNorm')
      norm(f'{ours}/output_norm', f'{hf}.intermediate.LayerNorm')
    else:       # After each residual sum.
      norm(f'{ours}/attention_norm', f'{hf}.attention.output.LayerNorm')
      norm(f'{ours}/output_norm', f'{hf}.output.LayerNorm')
  if pre_ln:
    norm('bert/final_norm', f'{base}.LayerNorm')
  if model_type(cfg) != ROFORMER:  # RoFormer has no pooler.
    linear('bert/pooler', f'{base}.pooler.dense', group='pooler')
  head = _mlm_head_keys(model_type(cfg))
  linear('mlm_head/transform', head['transform'], group='MLM head')
  norm('mlm_head/transform_norm', head['transform_norm'], group='MLM head')
  add('mlm_head/output_bias', head['bias'], group='MLM head')
  return entries


def _mlm_head_keys(kind: str) -> dict[str, str]:
  if kind == PRE_LN:
    return {'transform': 'lm_head.dense', 'transform_norm': 'lm_head.layer_norm',
            'bias': 'lm_head.bias', 'decoder': 'lm_head.decoder.weight',
            'decoder_bias': 'lm_head.decoder.bias'}
  return {'transform': 'cls.predictions.transform.dense',
          'transform_norm': 'cls.predictions.transform.LayerNorm', 'bias': 'cls.predictions.bias',
          'decoder': 'cls.predictions.decoder.weight',
          'decoder_bias': 'cls.predictions.decoder.bias'}


def _canonical_key(key: str, kind: str = BERT) -> str:
  """Keys as the MLM model names them: with the encoder's prefix ('bert.' for a BertModel's
  save), LayerNorm weight/bias (not gamma/beta)."""
  if key.startswith(('embeddings.', 'encoder.', 'pooler.', 'LayerNorm.')):  # A base model's.
    key = f'{PREFIX[kind]}.' + key
  if key.endswith('LayerNorm.gamma'):
    key = key[:-len('gamma')] + 'weight'
  elif key.endswith('LayerNorm.beta'):
    key = key[:-len('beta')] + 'bias'
  return key


def _get(tree: Params, path: tuple[str, ...]):
  for p in path:
    tree = tree[p]
  return tree


def _set(tree: Params, path: tuple[str, ...], value):
  for p in path[:-1]:
    tree = tree.setdefault(p, {})
  tree[path[-1]] = value


def init_params(cfg: ModelConfig, seed: int = 0) -> Params:
  """Freshly initialised parameters of BertForPretraining, as numpy arrays.

  Args:
    cfg: the ModelConfig.
    seed: the init's seed.
  Returns:
    The pretraining tree of numpy arrays.
  """
  model = BertForPretraining(cfg)
  ids = jnp.zeros((1, 1), jnp.int32)
  # Not jitted: op by op, whose compilations are cached across calls and sizes.
  params = nn.unbox(model.init(jax.random.key(seed), ids, ids, jnp.ones_like(ids), ids))
  return jax.tree.map(np.asarray, params['params'])


def params_from_hf(tensors: dict[str, np.ndarray], cfg: ModelConfig,
                   seed: int = 0) -> tuple[Params, list[str]]:
  """Our parameters from Hugging Face tensors; returns (params, notes on what was done).

  Args:
    tensors: {name: array}.
    cfg: the ModelConfig they fill.
    seed: the init of what they lack (an MLM head).
  Returns:
    (params, notes).
  """
  kind = model_type(cfg)
  head = _mlm_head_keys(kind)
  tensors = {_canonical_key(k, kind): v for k, v in tensors.items()}
  params = init_params(cfg, seed)
  entries = _mapping(cfg)
  notes = []
  used = set()
  for group in ('encoder', 'pooler', 'MLM head'):
    members = [e for e in entries if e.group == group]
    present = [e for e in members if e.key in tensors]
    if group == 'encoder' or present:
      missing = [e.key for e in members if e.key not in tensors]
      if missing:
        raise UserError(f'the checkpoint lacks {len(missing)} {group} tensor(s), e.g. '
                        f'{", ".join(missing[:3])}; is it a BERT of this config?')
      for e in members:
        value = e.to_ours(np.asarray(tensors[e.key]))
        expected = _get(params, e.path).shape
        if value.shape != expected:
          raise UserError(f'{e.key} has shape {tensors[e.key].shape}, which does not fit the '
                          f'config (expected {expected} as {"/".join(e.path)})')
        _set(params, e.path, value.astype(np.float32))
        used.add(e.key)
      if group != 'encoder':
        notes.append(f'{group}: from the checkpoint')
    else:
      notes.append(f'{group}: not in the checkpoint, freshly initialised (seed {seed})')

  decoder = tensors.get(head['decoder'])
  if decoder is not None:
    if not np.array_equal(decoder, tensors[f'{PREFIX[kind]}.embeddings.word_embeddings.weight']):
      raise UserError(f'{head["decoder"]} differs from the word embeddings; sharedbert ties '
                      'them and cannot hold an untied decoder')
    used.add(head['decoder'])
  decoder_bias = tensors.get(head['decoder_bias'])
  if decoder_bias is not None:
    if head['bias'] in tensors:
      if not np.array_equal(decoder_bias, tensors[head['bias']]):
        raise UserError(f'{head["decoder_bias"]} differs from {head["bias"]}')
    else:
      _set(params, ('mlm_head', 'output_bias'), decoder_bias.astype(np.float32))
    used.add(head['decoder_bias'])

  ignored = sorted(k for k in tensors if k not in used and (
      k in _IGNORED_KEYS or k.startswith(_IGNORED_PREFIXES)))
  unknown = sorted(set(tensors) - used - set(ignored))
  if unknown:
    raise UserError(f'the checkpoint has {len(unknown)} tensor(s) sharedbert cannot place, '
                    f'e.g. {", ".join(unknown[:3])}')
  if ignored:
    notes.append(f'ignored (no counterpart): {", ".join(ignored)}')
  dtypes = sorted({str(tensors[k].dtype) for k in used} - {'float32'})
  if dtypes:
    notes.append(f'converted {", ".join(dtypes)} tensors to float32')
  return params, notes


def hf_from_params(params: Params, cfg: ModelConfig,
                   groups: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
  """Hugging Face tensors (BertForMaskedLM or RobertaPreLayerNormForMaskedLM names, plus the
  pooler) from our parameters; only the entries of `groups` ('encoder', 'pooler', ...) when
  given (a classifier has no MLM head).

  Args:
    params: the pretraining tree.
    cfg: its ModelConfig.
    groups: the entries to write, or None for all.
  Returns:
    {name: array}.
  """
  hf_config_from_model(cfg)  # Refuses what neither layout can hold.
  return {e.key: np.ascontiguousarray(e.to_hf(np.asarray(_get(params, e.path), np.float32)))
          for e in _mapping(cfg) if groups is None or e.group in groups}
