"""sharedbert's encoders in PyTorch, for transformers (loaded with trust_remote_code=True).

Written by sharedbert's exporter beside the weights; imports torch and transformers only.
The parameters keep sharedbert's names and shapes (a projection's kernel is [D, N, H]: model
width, heads, head width), so the weights load one to one and every product below is the
einsum sharedbert computes. How each variant makes its queries, keys and values:

  standard    Q = x W_q + b_q, K = x W_k + b_k, V = x W_v + b_v (BERT)
  shared      S = x W_s + b_s; Q = S diag(d_q), K = S diag(d_k), V = S diag(d_v)
              (Kowsher et al., arXiv 2412.00359)
  shared_qk   S = x W_s + b_s; Q = S diag(d_q), K = S diag(d_k); V = x W_v + b_v
  symmetric   K = Q = x W_q + b_q; V standard (Courtois et al., arXiv 2406.06366)
  pairwise    Q as symmetric; each head's score is Q_h P_h Q_h^T with a full H x H matrix P_h
              (Courtois et al.)
  partial_qk  the first floor(rho H) columns of each head's Q and K from one projection, the
              rest from their own (Yang et al., ENLSP 2024)
  kv_shared   K = V = x W_kv + b_kv; Q standard (Kayyam et al., arXiv 2606.04032)
  single      Q = K = V = x W + b (Kayyam et al.)
  q_identity  Q = x split into heads, no query parameters (Karbevski, arXiv 2510.23912)
  masa        W_t of layer l = sum_s c_t[l, s] A_t,s: atoms shared by all layers (one tensor,
              bert.shared_attention), coefficients per layer; biases per layer
              (Zhussip et al., arXiv 2508.04581)

Scores are Q K^T / sqrt(H), masked keys at float32's minimum, softmax in float32; GELU is
the exact erf form; LayerNorm parameters are `scale` and `bias`.

Positions (config.position_embeddings): 'learned' adds a table to the input; 'rotary' turns
each head's column pairs (2p, 2p+1) of the queries and keys, just before the scores, by
(t + phi) w_p for queries and t w_p for keys, w_p = rope_theta^(-2p/H) (RoFormer's pairs;
phi = rope_query_phase); for shared that is Q = S diag(d_q), K = S diag(d_k), and for
pairwise the query Q_h P_h and the key Q_h. Rotary scores depend on positions only through
their difference, so left and right padding give the same outputs at the real tokens; with
a learned table they do not (the table is indexed from the row's first slot).
"""

import math

import torch
from torch import nn
import torch.nn.functional as F
from transformers import PreTrainedModel
from transformers.modeling_outputs import (BaseModelOutputWithPooling, MaskedLMOutput,
                                           SequenceClassifierOutput)

from .configuration_sharedbert import SharedBertConfig


def rotary_angles(length, head_width, theta, phase, device):
  """(t + phase) * theta^(-2p/H) for t < length: float32 [length, H/2], computed in float64
  as sharedbert does."""
  t = torch.arange(length, dtype=torch.float64, device=device) + phase
  w = theta ** (-torch.arange(0, head_width, 2, dtype=torch.float64, device=device) / head_width)
  return (t[:, None] * w[None, :]).float()


def rotate(x, angle):
  """x [B, T, N, H] with its column pairs (2p, 2p+1) turned by angle [T, H/2]."""
  cos = torch.cos(angle).to(x.dtype)[None, :, None, :]
  sin = torch.sin(angle).to(x.dtype)[None, :, None, :]
  pairs = x.reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
  even, odd = pairs[..., 0], pairs[..., 1]
  return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).reshape(x.shape)


def gelu(x):
  return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


class LayerNorm(nn.Module):
  def __init__(self, width, eps):
    super().__init__()
    self.scale = nn.Parameter(torch.ones(width))
    self.bias = nn.Parameter(torch.zeros(width))
    self.eps = eps

  def forward(self, x):
    return F.layer_norm(x, (x.shape[-1],), self.scale, self.bias, self.eps)


class Dense(nn.Module):
  """x [..., in] -> [..., out]: kernel [in, out] and bias, as Flax's Dense."""

  def __init__(self, width_in, width_out):
    super().__init__()
    self.kernel = nn.Parameter(torch.zeros(width_in, width_out))
    self.bias = nn.Parameter(torch.zeros(width_out))

  def forward(self, x):
    return x @ self.kernel + self.bias


class HeadsProjection(nn.Module):
  """x [B, T, D] -> [B, T, N, H]; the kernel is this module's, or given (masa)."""

  def __init__(self, width, heads, head_width, own_kernel=True):
    super().__init__()
    if own_kernel:
      self.kernel = nn.Parameter(torch.zeros(width, heads, head_width))
    self.bias = nn.Parameter(torch.zeros(heads, head_width))

  def forward(self, x, kernel=None):
    kernel = self.kernel if kernel is None else kernel
    return torch.einsum('btd,dnh->btnh', x, kernel) + self.bias


class OutputProjection(nn.Module):
  """W_o: [B, T, N, H] -> [B, T, D]; the kernel [N, H, D] is this module's, or given (masa)."""

  def __init__(self, heads, head_width, width, own_kernel=True):
    super().__init__()
    if own_kernel:
      self.kernel = nn.Parameter(torch.zeros(heads, head_width, width))
    self.bias = nn.Parameter(torch.zeros(width))

  def forward(self, x, kernel=None):
    kernel = self.kernel if kernel is None else kernel
    return torch.einsum('btnh,nhd->btd', x, kernel) + self.bias


def masa_atoms(config):
  return config.masa_atoms or -(-config.num_hidden_layers // 3)


class MasaTypeDictionary(nn.Module):
  """One projection type's atoms [S, ...] and per-layer coefficients [L, S]."""

  def __init__(self, config, projection_type):
    super().__init__()
    d, n = config.hidden_size, config.num_attention_heads
    h, s = d // n, masa_atoms(config)
    shape = (s, n, h, d) if projection_type == 'o' else (s, d, n, h)
    self.atoms = nn.Parameter(torch.zeros(shape))
    self.coefficients = nn.Parameter(torch.zeros(config.num_hidden_layers, s))

  def kernel(self, layer):
    return torch.einsum('a,a...->...', self.coefficients[layer], self.atoms)


class MasaDictionary(nn.Module):
  """The encoder's dictionary, one entry per type of config.masa_projections."""

  def __init__(self, config):
    super().__init__()
    for t in config.masa_projections:
      self.add_module(t, MasaTypeDictionary(config, t))


class Attention(nn.Module):
  """Self-attention of one layer, for every variant (config.attention_variant)."""

  def __init__(self, config, layer_index):
    super().__init__()
    self.variant = config.attention_variant
    self.layer_index = layer_index
    self.rotary = config.position_embeddings == 'rotary'
    self.rope_theta, self.rope_query_phase = config.rope_theta, config.rope_query_phase
    d, n = config.hidden_size, config.num_attention_heads
    h = d // n
    self.heads, self.head_width = n, h
    self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
    masa_types = config.masa_projections if self.variant == 'masa' else ''
    proj = lambda width=h, t='': HeadsProjection(d, n, width, own_kernel=not t or t not in masa_types)
    v = self.variant
    if v in ('standard', 'masa'):
      self.query, self.key, self.value = proj(t='q'), proj(t='k'), proj(t='v')
    elif v in ('shared', 'single', 'shared_qk'):
      self.shared = proj()
      if v == 'shared':
        self.diag = nn.Parameter(torch.ones(3, n, h))  # d_q, d_k, d_v
      if v == 'shared_qk':
        self.diag = nn.Parameter(torch.ones(2, n, h))  # d_q, d_k
        self.value = proj()
    elif v in ('symmetric', 'pairwise'):
      self.query, self.value = proj(), proj()
      if v == 'pairwise':
        self.pairwise = nn.Parameter(torch.zeros(n, h, h))
    elif v == 'partial_qk':
      self.common = int(math.floor(config.qk_shared_fraction * h + 1e-9))
      if self.common:
        self.query_key = proj(self.common)
      if h - self.common:
        self.query, self.key = proj(h - self.common), proj(h - self.common)
      self.value = proj()
    elif v == 'kv_shared':
      self.query, self.key_value = proj(), proj()
    elif v == 'q_identity':
      self.key, self.value = proj(), proj()
    else:
      raise ValueError(f'unknown attention variant {v!r}')
    self.out = OutputProjection(n, h, d, own_kernel='o' not in masa_types)

  def qkv(self, x, dictionary):
    """Queries, keys and values [B, T, N, H], and the score's right-hand factor."""
    v = self.variant
    if v == 'standard':
      return self.query(x), self.key(x), self.value(x)
    if v == 'masa':
      kernel = lambda t: (getattr(dictionary, t).kernel(self.layer_index)
                          if hasattr(dictionary, t) else None)
      return (self.query(x, kernel('q')), self.key(x, kernel('k')),
              self.value(x, kernel('v')))
    if v == 'shared':
      s = self.shared(x)
      return s * self.diag[0], s * self.diag[1], s * self.diag[2]
    if v == 'shared_qk':
      s = self.shared(x)
      return s * self.diag[0], s * self.diag[1], self.value(x)
    if v == 'single':
      s = self.shared(x)
      return s, s, s
    if v == 'symmetric':
      q = self.query(x)
      return q, q, self.value(x)
    if v == 'pairwise':
      q = self.query(x)
      return torch.einsum('btnh,nhg->btng', q, self.pairwise), q, self.value(x)
    if v == 'partial_qk':
      q_parts, k_parts = [], []
      if self.common:
        both = self.query_key(x)
        q_parts.append(both)
        k_parts.append(both)
      if self.head_width - self.common:
        q_parts.append(self.query(x))
        k_parts.append(self.key(x))
      return torch.cat(q_parts, dim=-1), torch.cat(k_parts, dim=-1), self.value(x)
    if v == 'kv_shared':
      kv = self.key_value(x)
      return self.query(x), kv, kv
    if v == 'q_identity':
      b, t, _ = x.shape
      return x.reshape(b, t, self.heads, self.head_width), self.key(x), self.value(x)
    raise ValueError(v)

  def forward(self, x, mask, dictionary=None):
    """x [B, T, D]; mask [B, 1, T or 1, S], True where a query may see a key. Returns the
    output [B, T, D] and the attention probabilities [B, N, T, S]."""
    q, k, v = self.qkv(x, dictionary)
    if self.rotary:
      length, width = x.shape[1], q.shape[-1]
      key_angle = rotary_angles(length, width, self.rope_theta, 0.0, x.device)
      query_angle = (rotary_angles(length, width, self.rope_theta, self.rope_query_phase,
                                   x.device) if self.rope_query_phase else key_angle)
      q, k = rotate(q, query_angle), rotate(k, key_angle)
    scores = torch.einsum('btnh,bsnh->bnts', q.float(), k.float()) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, torch.finfo(torch.float32).min)
    attention = torch.softmax(scores, dim=-1)
    probs = self.dropout(attention).to(v.dtype)
    out = torch.einsum('bnts,bsnh->btnh', probs, v)
    kernel = (dictionary.o.kernel(self.layer_index)
              if dictionary is not None and hasattr(dictionary, 'o') else None)
    return self.out(out, kernel), attention


class FeedForward(nn.Module):
  def __init__(self, config):
    super().__init__()
    self.intermediate = Dense(config.hidden_size, config.intermediate_size)
    self.output = Dense(config.intermediate_size, config.hidden_size)

  def forward(self, x):
    return self.output(gelu(self.intermediate(x)))


class EncoderLayer(nn.Module):
  """Attention and feed-forward sublayers with residuals; post-LN (BERT) or pre-LN."""
  # Set by PreTrainedModel.gradient_checkpointing_enable (with _gradient_checkpointing_func).
  gradient_checkpointing = False

  def __init__(self, config, layer_index):
    super().__init__()
    self.pre_layer_norm = config.pre_layer_norm
    self.attention = Attention(config, layer_index)
    self.mlp = FeedForward(config)
    self.attention_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)
    self.output_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)
    self.dropout = nn.Dropout(config.hidden_dropout_prob)

  def forward(self, x, mask, dictionary=None):
    """The layer's output [B, T, D] and its attention probabilities [B, N, T, S]."""
    if self.pre_layer_norm:
      attended, attention = self.attention(self.attention_norm(x), mask, dictionary)
      x = x + self.dropout(attended)
      return x + self.dropout(self.mlp(self.output_norm(x))), attention
    attended, attention = self.attention(x, mask, dictionary)
    x = self.attention_norm(x + self.dropout(attended))
    return self.output_norm(x + self.dropout(self.mlp(x))), attention


class Embed(nn.Module):
  """A table [rows, width] (Flax's name, `embedding`); called with ids, it looks them up, as
  nn.Embedding does (`get_input_embeddings()(ids)`)."""

  def __init__(self, rows, width):
    super().__init__()
    self.embedding = nn.Parameter(torch.zeros(rows, width))

  @property
  def weight(self):  # nn.Embedding's name, for code that reads it.
    return self.embedding

  @property
  def num_embeddings(self):
    return self.embedding.shape[0]

  @property
  def embedding_dim(self):
    return self.embedding.shape[1]

  def forward(self, ids):
    return self.embedding[ids]


class Embeddings(nn.Module):
  """Token + position + segment embeddings, then LayerNorm and dropout."""

  def __init__(self, config):
    super().__init__()
    self.word_embeddings = Embed(config.vocab_size, config.hidden_size)
    if config.position_embeddings in ('learned', True):
      self.position_embeddings = Embed(config.max_position_embeddings, config.hidden_size)
    self.token_type_embeddings = Embed(config.type_vocab_size, config.hidden_size)
    self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
    self.dropout = nn.Dropout(config.hidden_dropout_prob)

  def forward(self, input_ids, token_type_ids):
    x = self.word_embeddings.embedding[input_ids]
    if hasattr(self, 'position_embeddings'):
      x = x + self.position_embeddings.embedding[:input_ids.shape[1]][None]
    x = x + self.token_type_embeddings.embedding[token_type_ids]
    return self.dropout(self.LayerNorm(x))


class SharedBertPreTrainedModel(PreTrainedModel):
  config_class = SharedBertConfig
  base_model_prefix = 'bert'
  supports_gradient_checkpointing = True

  def get_input_embeddings(self):
    return self.base_model.embeddings.word_embeddings

  def set_input_embeddings(self, value):
    if not isinstance(value, Embed):  # e.g. an nn.Embedding: keep the table, in our module.
      table = Embed(*value.weight.shape)
      table.embedding = value.weight
      value = table
    self.base_model.embeddings.word_embeddings = value

  def resize_token_embeddings(self, new_num_tokens=None, pad_to_multiple_of=None,
                              mean_resizing=True):
    """As PreTrainedModel's: the word table to `new_num_tokens` rows (rounded up to
    `pad_to_multiple_of`), old rows kept, new rows the mean of the old ones (mean_resizing)
    or N(0, initializer_range); the MLM head's output bias follows (new entries 0), since
    its decoder is the word table itself. Returns the table."""
    table = self.get_input_embeddings()
    if new_num_tokens is None and pad_to_multiple_of is None:
      return table
    old = table.embedding.data
    rows = old.shape[0] if new_num_tokens is None else int(new_num_tokens)
    if pad_to_multiple_of:
      rows = -(-rows // pad_to_multiple_of) * pad_to_multiple_of
    new = old.new_empty(rows, old.shape[1])
    keep = min(rows, old.shape[0])
    new[:keep] = old[:keep]
    if rows > keep:
      if mean_resizing:
        new[keep:] = old.mean(0, keepdim=True)
      else:
        nn.init.normal_(new[keep:], std=self.config.initializer_range)
    table.embedding = nn.Parameter(new)
    head = getattr(self, 'mlm_head', None)
    if head is not None:
      bias = head.output_bias.data
      grown = bias.new_zeros(rows)
      grown[:min(rows, bias.shape[0])] = bias[:rows]
      head.output_bias = nn.Parameter(grown)
    self.config.vocab_size = rows
    self.base_model.config.vocab_size = rows
    return table

  def _init_weights(self, module):
    """Weights not in a checkpoint (a new classifier): BERT's N(0, initializer_range)."""
    std = self.config.initializer_range
    if isinstance(module, (Dense, HeadsProjection, OutputProjection)):
      if hasattr(module, 'kernel'):
        nn.init.normal_(module.kernel, std=std)
      nn.init.zeros_(module.bias)
    elif isinstance(module, Embed):
      nn.init.normal_(module.embedding, std=std)
    elif isinstance(module, LayerNorm):
      nn.init.ones_(module.scale)
      nn.init.zeros_(module.bias)


class SharedBertModel(SharedBertPreTrainedModel):
  """The encoder: embeddings, layers, the final LayerNorm (pre-LN) and the [CLS] pooler."""

  def __init__(self, config):
    super().__init__(config)
    self.embeddings = Embeddings(config)
    if config.attention_variant == 'masa':
      self.shared_attention = MasaDictionary(config)
    for i in range(config.num_hidden_layers):
      self.add_module(f'layer_{i}', EncoderLayer(config, i))
    if config.pre_layer_norm:
      self.final_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)
    self.pooler = Dense(config.hidden_size, config.hidden_size)
    self.post_init()

  def forward(self, input_ids=None, attention_mask=None, token_type_ids=None,
              output_hidden_states=None, output_attentions=None, return_dict=None, **kwargs):
    """As BertModel: hidden_states (L + 1 of [B, T, D]) and attentions (L of [B, N, T, S],
    the softmax probabilities) when asked for."""
    if attention_mask is None:
      # As BertModel: a padded batch without a mask attends to its padding; say so.
      if hasattr(self, 'warn_if_padding_and_no_attention_mask'):
        self.warn_if_padding_and_no_attention_mask(input_ids, attention_mask)
      attention_mask = torch.ones_like(input_ids)
    if token_type_ids is None:
      token_type_ids = torch.zeros_like(input_ids)
    length = input_ids.shape[1]
    mask = attention_mask.bool()[:, None, None, :]
    if self.config.causal:
      mask = mask & torch.ones(length, length, dtype=torch.bool,
                               device=input_ids.device).tril()[None, None]
    dictionary = getattr(self, 'shared_attention', None)
    x = self.embeddings(input_ids, token_type_ids)
    hidden_states, attentions = [x], []
    for i in range(self.config.num_hidden_layers):
      layer = getattr(self, f'layer_{i}')
      if layer.gradient_checkpointing and self.training and torch.is_grad_enabled():
        x, attention = layer._gradient_checkpointing_func(layer.__call__, x, mask, dictionary)
      else:
        x, attention = layer(x, mask, dictionary)
      hidden_states.append(x)
      attentions.append(attention)
    if self.config.pre_layer_norm:
      x = self.final_norm(x)
      hidden_states[-1] = x
    pooled = torch.tanh(self.pooler(x[:, 0]))
    return BaseModelOutputWithPooling(
        last_hidden_state=x, pooler_output=pooled,
        hidden_states=tuple(hidden_states) if output_hidden_states else None,
        attentions=tuple(attentions) if output_attentions else None)


class MLMHead(nn.Module):
  """Transform (dense, GELU, LayerNorm), then the tied word embeddings plus a bias."""

  def __init__(self, config):
    super().__init__()
    self.transform = Dense(config.hidden_size, config.hidden_size)
    self.transform_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)
    self.output_bias = nn.Parameter(torch.zeros(config.vocab_size))

  def forward(self, x, word_embeddings):
    x = self.transform_norm(gelu(self.transform(x)))
    return x @ word_embeddings.T + self.output_bias


class SharedBertForMaskedLM(SharedBertPreTrainedModel):
  def __init__(self, config):
    super().__init__(config)
    self.bert = SharedBertModel(config)
    self.mlm_head = MLMHead(config)
    self.post_init()

  def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None,
              output_hidden_states=None, output_attentions=None, return_dict=None, **kwargs):
    out = self.bert(input_ids, attention_mask, token_type_ids,
                    output_hidden_states=output_hidden_states,
                    output_attentions=output_attentions)
    logits = self.mlm_head(out.last_hidden_state, self.bert.embeddings.word_embeddings.embedding)
    loss = None
    if labels is not None:
      loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1),
                             ignore_index=-100)
    return MaskedLMOutput(loss=loss, logits=logits, hidden_states=out.hidden_states,
                          attentions=out.attentions)


class SharedBertForSequenceClassification(SharedBertPreTrainedModel):
  """Dropout, then a dense layer, on the pooled sequence (config.pooling)."""

  def __init__(self, config):
    super().__init__(config)
    self.bert = SharedBertModel(config)
    self.dropout = nn.Dropout(config.hidden_dropout_prob)
    self.classifier = Dense(config.hidden_size, config.num_labels)
    self.post_init()

  def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None,
              output_hidden_states=None, output_attentions=None, return_dict=None, **kwargs):
    if attention_mask is None:
      if hasattr(self, 'warn_if_padding_and_no_attention_mask'):
        self.warn_if_padding_and_no_attention_mask(input_ids, attention_mask)
      attention_mask = torch.ones_like(input_ids)
    out = self.bert(input_ids, attention_mask, token_type_ids,
                    output_hidden_states=output_hidden_states,
                    output_attentions=output_attentions)
    if self.config.pooling == 'mean':
      m = attention_mask.to(out.last_hidden_state.dtype)[:, :, None]
      pooled = (out.last_hidden_state * m).sum(1) / m.sum(1).clamp(min=1.0)
    else:
      pooled = out.pooler_output
    logits = self.classifier(self.dropout(pooled))
    loss = None
    if labels is not None:
      if self.config.num_labels == 1:
        loss = F.mse_loss(logits.squeeze(-1), labels.float())
      else:
        loss = F.cross_entropy(logits, labels)
    return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states,
                                    attentions=out.attentions)


# So that save_pretrained of a loaded model writes these files and the auto_map again.
SharedBertConfig.register_for_auto_class()
SharedBertModel.register_for_auto_class('AutoModel')
SharedBertForMaskedLM.register_for_auto_class('AutoModelForMaskedLM')
SharedBertForSequenceClassification.register_for_auto_class('AutoModelForSequenceClassification')
