"""Building blocks for the experiment configs in `configs/`.

Each file in `configs/` is a `get_config(arg)` that calls into this module, so every
variant shares one recipe and differs only where it says so. `arg` is the text after the
colon in `--config=configs/shared_base.py:tiny` and takes presets and `key=value` pairs,
comma-separated (`size=tiny`, `tiny`, `size=small,corpus=demo`).

The default is the BERT-base pretraining recipe of docs/design.md (Courtois et al. 2024,
arXiv 2406.06366, at sequence length 128): AdamW lr 1e-4, 10k warmup then linear decay,
weight decay 0.01, betas (0.9, 0.999), eps 1e-12, dropout 0.1, 15% masking, batch 256.
"""

from __future__ import annotations

import ml_collections

from sharedbert.errors import UserError

# Model sizes: (layers, width, heads, ffn, vocabulary).
SIZES = {
    # BERT-base (Devlin et al. 2018).
    'base': dict(num_layers=12, hidden_size=768, num_heads=12, mlp_dim=3072, vocab_size=30522),
    # A small model for one GPU, or 30 minutes of a 2-core CPU (the `small` preset).
    'small': dict(num_layers=4, hidden_size=256, num_heads=4, mlp_dim=1024, vocab_size=8192),
    # Runs end to end on a 2-core CPU in a few minutes.
    'tiny': dict(num_layers=2, hidden_size=128, num_heads=2, mlp_dim=512, vocab_size=2048),
}
# About 30 minutes of a 2-core CPU: tiny's model, trained longer. Per second of such a
# machine it learns faster than `small` (on DATA/corpus: small 0.275 held-out
# after 35 min; tiny 0.298 after 2,500 steps of about 0.2 s, under 10 min).
SIZES['cpu30'] = SIZES['tiny']

# The tfds corpus of the base presets (English Wikipedia); prepare it with
# `tfds build wikipedia/20230601.en --data_dir=...` on a machine with network access.
DEFAULT_TFDS_CORPUS = 'tfds:wikipedia/20230601.en'

# How each logical axis of a parameter or activation maps onto the mesh ('data', 'fsdp',
# 'tensor'). Parameters are sharded over 'fsdp' along their embedding axis and over
# 'tensor' along heads / mlp / vocab (Megatron style); the batch spans data and fsdp.
DEFAULT_LOGICAL_AXIS_RULES = (
    ('batch', ('data', 'fsdp')),
    ('length', None),
    ('vocab', 'tensor'),
    ('embed', 'fsdp'),
    ('heads', 'tensor'),
    ('kv', None),
    ('mlp', 'tensor'),
    ('qkv', None),
    ('layers', None),
    ('atoms', None),
)


def parse_arg(arg: str | None, known: dict[str, object],
              lists: tuple[str, ...] = ()) -> dict[str, object]:
  """Parses 'tiny' or 'size=tiny,corpus=demo' into a dict, typed like `known`'s values.

  A key in `lists` takes a comma-separated list: the bare words after it are its items
  ('task=cola,sst2,seeds=3': task 'cola,sst2').

  Args:
    arg: the text after the config file's colon, or None.
    known: {key: default}; a bare word sets the first key.
    lists: the keys that take lists.
  Returns:
    {key: value}, every known key.
  Raises:
    UserError: an unknown key or a value of the wrong type.
  """
  values = dict(known)
  if not arg:
    return values
  last = None
  for item in arg.split(','):
    item = item.strip()
    if not item:
      continue
    if '=' not in item and last in lists:
      values[last] = f'{values[last]},{item}'
      continue
    if '=' not in item:
      # A bare word is the first preset key's value ('tiny' means 'size=tiny').
      key, value = next(iter(known)), item
    else:
      key, value = (s.strip() for s in item.split('=', 1))
    if key not in known:
      raise UserError(f'unknown config argument {key!r} in {arg!r}; known: {", ".join(known)}')
    last = key
    default = known[key]
    if isinstance(default, bool):
      values[key] = value.lower() in ('1', 'true', 'yes')
    elif isinstance(default, int):
      values[key] = int(value)
    elif isinstance(default, float):
      values[key] = float(value)
    else:
      values[key] = value
  return values


def model_config(attention: str, size: str) -> ml_collections.ConfigDict:
  """The model section for `attention` at a named size (SIZES: tiny, small, base, ...).

  Args:
    attention: the variant.
    size: a key of SIZES.
  Returns:
    config.model.
  """
  m = ml_collections.ConfigDict()
  m.attention = attention
  m.update(SIZES[size])
  m.max_position_embeddings = 512
  m.type_vocab_size = 2
  m.dropout_rate = 0.1
  m.attention_dropout_rate = 0.1
  m.initializer_range = 0.02
  m.layer_norm_eps = 1e-12
  m.pre_layer_norm = False       # BERT is post-LN; True puts LayerNorm before each sublayer.
  m.dtype = 'float32'            # Compute dtype ('bfloat16' on accelerators).
  m.param_dtype = 'float32'
  m.remat = 'none'               # 'none' | 'full' | 'dots' (save only matmul outputs).
  m.scan_layers = False          # True: nn.scan over the layers (params stacked on 'layers').
  m.attention_impl = 'xla'       # 'xla' (einsum softmax) | 'fused' (jax.nn.dot_product_attention)
                                 # | 'cudnn' (the same, cuDNN's kernel on GPUs).
  m.one_hot_embeddings = False   # True: the word table's gradient as a product (TPU-style).
  # A variant's own settings (shared's diagonals' start, masa's atoms, ...) are declared by
  # its class and set in its config file (configs/<variant>_base.py).
  # Positions: 'learned' (BERT's table), 'rotary' (queries and keys rotated by position,
  # RoFormer's RoPE; no table, no length limit) or 'none' (an order-free input).
  m.position_embeddings = 'learned'
  m.rope_theta = 10000.0         # rotary: base of the frequencies (ModernBERT global: 160,000).
  m.rope_query_phase = 0.0       # rotary: phi; query i turned by i + phi, key j by j.
  # Probe setting (configs/probe.py); BERT is bidirectional.
  m.causal = False               # True: token t attends to tokens <= t only.
  return m


# The budget recipe (`recipe=budget`): what changes from BERT's recipe to learn the most per
# second of wall time on small hardware, after Cramming (Geiping & Goldstein 2022, arXiv
# 2212.14034) and Wettig et al. 2022 (arXiv 2202.08005), measured in docs/recipe/recipe.md. The
# same keys for every attention variant, so a study stays matched. Grouped by idea: each
# group is one row of the ablation (sharedbert.lab.recipe_ablation leaves it out).
BUDGET_RECIPE = {
    'pre-LN': {'model.pre_layer_norm': True},
    'no dropout': {'model.dropout_rate': 0.0, 'model.attention_dropout_rate': 0.0},
    'peak lr 2e-3': {'optim.lr': 2e-3},
    'Adam b2 0.98': {'optim.b2': 0.98},
    'mask 40%': {'data.mask_rate': 0.4},
    # BERT's 0.02 suits D=768 (about 0.55/sqrt(D)); narrow models start with layers whose
    # outputs are too small beside the residual stream. 0.7/sqrt(D): 0.062 at D=128.
    'init 0.7/sqrt(D)': {'model.initializer_range': lambda c: round(0.7 / c.model.hidden_size ** 0.5, 4)},
    # Rows of 32 tokens instead of 128. At 128, small models sit for thousands of steps on a
    # bag-of-words plateau (attention spread over the whole row, position embeddings shrinking
    # towards zero); at 32 the same model leaves it within ~1,000 steps and uses its
    # neighbours (docs/recipe/exploration.md). Fine-tuning sets its own length.
    'rows of 32 tokens': {'data.seq_len': 32},
}
RECIPES = ('bert', 'budget')

# Fixed sentences in the style of the demo corpus (the standard library's docstrings).
DEMO_FILL_MASK_EXAMPLES = (
    'Return the [MASK] of the list.',
    'If the file does not [MASK], an error is raised.',
    'The default value is [MASK].',
    'Raise a [MASK] if the key is not found.',
    'This method is called when the [MASK] is closed.',
)


def recipe_overrides(recipe: str, without: tuple[str, ...] = (),
                     config: ml_collections.ConfigDict | None = None) -> dict[str, object]:
  """The keys (dotted) that `recipe` sets on top of BERT's recipe, minus the named groups.

  A value may depend on the config it is applied to (the init scale on the width); with
  `config` None such values are left as functions of it.

  Args:
    recipe: 'bert' or 'budget'.
    without: groups to leave out.
    config: the config they apply to, or None.
  Returns:
    {'a.b': value or function of the config}.
  """
  if recipe not in RECIPES:
    raise UserError(f'unknown recipe {recipe!r}; choose one of {", ".join(RECIPES)}')
  unknown = set(without) - set(BUDGET_RECIPE)
  if unknown:
    raise UserError(f'unknown budget-recipe groups {sorted(unknown)}; known: '
                    f'{", ".join(BUDGET_RECIPE)}')
  if recipe == 'bert':
    return {}
  return {k: (v(config) if callable(v) and config is not None else v)
          for group, keys in BUDGET_RECIPE.items() if group not in without
          for k, v in keys.items()}


def apply_overrides(config: ml_collections.ConfigDict, overrides: dict[str, object]):
  """Sets each {'a.b': value} in `config` in place (for presets' overrides).

  Args:
    config: the config, changed in place.
    overrides: recipe_overrides'.
  Returns:
    None.
  """
  for dotted, value in overrides.items():
    *parents, leaf = dotted.split('.')
    node = config
    for name in parents:
      node = node[name]
    node[leaf] = value


def pretrain_config(attention: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """The pretraining recipe for one attention variant; see the module docstring.

  One function on purpose: every key of the recipe and its default, then what each preset
  changes, in the order docs/configs.md's reference lists them.

  Args:
    attention: the variant (model.attention).
    arg: the preset after the config file's colon ('tiny', 'size=small,corpus=PATH', ...).
  Returns:
    The pretraining ConfigDict (a variant's own settings are its config file's to add).
  """
  args = parse_arg(arg, {'size': 'base', 'corpus': '', 'recipe': ''})
  size = args['size']
  if size not in SIZES:
    raise UserError(f'unknown model size {size!r}; choose one of {", ".join(SIZES)}')
  # BERT's recipe for BERT-base (the papers' setting); the budget recipe for the sizes
  # meant for one small machine.
  recipe = args['recipe'] or ('bert' if size == 'base' else 'budget')

  config = ml_collections.ConfigDict()
  config.mode = 'pretrain'
  config.seed = 0
  config.model = model_config(attention, size)

  config.data = ml_collections.ConfigDict()
  config.data.corpus = args['corpus'] or DEFAULT_TFDS_CORPUS
  config.data.tfds_data_dir = ''      # '' means tfds' default (~/tensorflow_datasets).
  config.data.tfds_text_key = 'text'
  config.data.seq_len = 128
  config.data.batch_size = 256        # Global batch, over all processes.
  config.data.mask_rate = 0.15
  config.data.max_predictions = 0     # Cap per sequence; 0: ceil(mask_rate * seq_len) (BERT: 20).
  config.data.eval_mask_rate = 0.15   # Held-out evaluation's masking rate, whatever mask_rate is.
  config.data.eval_fraction = 0.01    # Held-out share of the documents (local corpora).
  config.data.vocab_train_sentences = 2_000_000  # Lines sentencepiece samples to learn the vocabulary.
  config.data.vocab_model_type = 'unigram'
  config.data.shuffle_buffer = 10_000  # Rows in the shuffle buffer of streamed (tfds) corpora.

  config.optim = ml_collections.ConfigDict()
  config.optim.lr = 1e-4
  config.optim.warmup_steps = 10_000
  # The decay's length; 0: total_steps. Larger, the run stops part-way down the schedule
  # (and resumes with a larger total_steps along it): the uptraining's timed checkpoints.
  config.optim.schedule_steps = 0
  config.optim.weight_decay = 0.01
  config.optim.b1 = 0.9
  config.optim.b2 = 0.999
  config.optim.eps = 1e-12
  config.optim.grad_clip_norm = 1.0
  config.optim.grad_accum_steps = 1   # Micro-batches per step, scanned inside the jitted step.
  config.optim.max_skipped_steps = 10  # Consecutive non-finite steps before the run stops.

  config.mesh = ml_collections.ConfigDict()
  config.mesh.data = -1               # -1: all devices not used by the other axes.
  config.mesh.fsdp = 1
  config.mesh.tensor = 1
  config.mesh.logical_axis_rules = DEFAULT_LOGICAL_AXIS_RULES

  config.ckpt = ml_collections.ConfigDict()
  config.ckpt.every_steps = 5_000
  config.ckpt.max_to_keep = 3
  config.ckpt.async_save = True

  config.total_steps = 200_000
  config.log_every_steps = 100
  config.eval_every_steps = 5_000
  config.eval_batches = 20            # Held-out batches per evaluation (0: all of them).
  config.restart = False              # True: discard an incompatible checkpoint in the workdir.
  # Sentences for fill_mask at the end of the run (printed and in summary.json): a quick look
  # at whether the model uses context. The demo presets set some for the demo corpus.
  config.fill_mask_examples = ()

  if size == 'small':
    # One GPU, or a long CPU run: 2,200 steps took 35 min on 2 idle CPU cores (0.95 s a
    # step; held-out 0.275 on DATA/corpus). For 30 CPU minutes `cpu30` learns more.
    config.data.corpus = args['corpus'] or 'demo'
    config.data.batch_size = 64
    config.optim.lr = 5e-4
    config.optim.warmup_steps = 100
    config.total_steps = 2_200
    config.log_every_steps = 50
    config.eval_every_steps = 200
    config.ckpt.every_steps = 400
  elif size == 'cpu30':
    # The 30-minute preset: tiny's model and settings for 8,000 steps of 64 x 32 (about
    # 0.2 s a step on 2 idle cores with DATA/corpus, whose input pipeline costs
    # more than the demo's); meant for a corpus of a few MB or more.
    config.data.corpus = args['corpus'] or 'demo'
    config.data.batch_size = 64
    config.optim.warmup_steps = 100
    config.total_steps = 8_000
    config.log_every_steps = 100
    config.eval_every_steps = 1_000
    config.ckpt.every_steps = 1_000
  elif size == 'tiny':
    # The README's demo: under 5 minutes on 2 CPU cores, install excluded (about 0.13 s a
    # step at 64 x 32 on 2 idle cores).
    config.data.corpus = args['corpus'] or 'demo'
    config.data.batch_size = 64
    config.data.vocab_train_sentences = 200_000
    config.data.eval_fraction = 0.1  # About 4,000 masked held-out tokens: +-0.006 at 20%.
    config.optim.lr = 1e-3
    config.optim.warmup_steps = 50
    config.total_steps = 1_800
    config.log_every_steps = 50
    config.eval_every_steps = 300
    config.eval_batches = 0
    config.ckpt.every_steps = 300
  if config.data.corpus == 'demo':
    config.fill_mask_examples = DEMO_FILL_MASK_EXAMPLES
  apply_overrides(config, recipe_overrides(recipe, config=config))
  return config
