"""The configuration of a sharedbert encoder in transformers (shipped beside its weights and
loaded with trust_remote_code=True). Written by sharedbert's exporter; imports transformers
only."""

from transformers import PretrainedConfig

VARIANTS = ('standard', 'shared', 'shared_qk', 'symmetric', 'pairwise', 'partial_qk',
            'kv_shared', 'single', 'q_identity', 'masa')


class SharedBertConfig(PretrainedConfig):
  """A BERT encoder whose self-attention is one of sharedbert's variants.

  attention_variant   how queries, keys and values are made (modeling_sharedbert.py)
  pre_layer_norm      LayerNorm before each sublayer (and after the last layer), else after
  causal              each token attends to itself and the tokens before it only
  position_embeddings 'learned' (a table added to the input, BERT's), 'rotary' (queries and
                      keys turned by their positions, RoFormer's pairs) or 'none' (an
                      order-free input); true/false, from older folders, mean learned/none
  rope_theta          rotary: the frequencies' base, w_p = rope_theta^(-2p/H)
  rope_query_phase    rotary: phi; query i is turned by (i + phi) w_p, key j by j w_p
  pooling             'cls' (BERT's pooler on [CLS]) or 'mean' (real tokens' mean): what the
                      sequence classifier reads
  qk_shared_fraction  partial_qk: the share of each head's query/key columns that is common
  masa_atoms, masa_projections  masa: atoms per projection type, and which types use them
  """
  model_type = 'sharedbert'

  def __init__(self, attention_variant='standard', vocab_size=30522, hidden_size=768,
               num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
               max_position_embeddings=512, type_vocab_size=2, hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1, initializer_range=0.02, layer_norm_eps=1e-12,
               pre_layer_norm=False, causal=False, position_embeddings='learned',
               rope_theta=10000.0, rope_query_phase=0.0, pooling='cls',
               qk_shared_fraction=0.5, masa_atoms=4, masa_projections='qkvo', pad_token_id=0,
               **kwargs):
    if attention_variant not in VARIANTS:
      raise ValueError(f'attention_variant must be one of {VARIANTS}, not {attention_variant!r}')
    if position_embeddings is True or position_embeddings is False:
      position_embeddings = 'learned' if position_embeddings else 'none'
    if position_embeddings not in ('learned', 'rotary', 'none'):
      raise ValueError("position_embeddings must be 'learned', 'rotary' or 'none', not "
                       f"{position_embeddings!r}")
    if pooling not in ('cls', 'mean'):
      raise ValueError(f"pooling must be 'cls' or 'mean', not {pooling!r}")
    # No begin/end-of-sequence ids (an encoder); named, as transformers' padding check
    # reads them.
    bos_token_id = kwargs.pop('bos_token_id', None)
    eos_token_id = kwargs.pop('eos_token_id', None)
    super().__init__(pad_token_id=pad_token_id, **kwargs)
    self.bos_token_id, self.eos_token_id = bos_token_id, eos_token_id
    self.attention_variant = attention_variant
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.num_hidden_layers = num_hidden_layers
    self.num_attention_heads = num_attention_heads
    self.intermediate_size = intermediate_size
    self.max_position_embeddings = max_position_embeddings
    self.type_vocab_size = type_vocab_size
    self.hidden_dropout_prob = hidden_dropout_prob
    self.attention_probs_dropout_prob = attention_probs_dropout_prob
    self.initializer_range = initializer_range
    self.layer_norm_eps = layer_norm_eps
    self.pre_layer_norm = pre_layer_norm
    self.causal = causal
    self.position_embeddings = position_embeddings
    self.rope_theta = rope_theta
    self.rope_query_phase = rope_query_phase
    self.pooling = pooling
    self.qk_shared_fraction = qk_shared_fraction
    self.masa_atoms = masa_atoms
    self.masa_projections = masa_projections
