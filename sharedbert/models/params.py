r"""Parameter report: what each attention variant costs, counted from the real parameter tree.

  python -m sharedbert.models.params --config=configs/shared_base.py
  python -m sharedbert.models.params --all [--config=configs/standard_base.py:tiny]

The counts come from `jax.eval_shape` of the model's `init` (shapes only: no parameter is
allocated, so BERT-large costs nothing), grouped by component: embeddings, attention QKV
(every parameter that makes queries, keys and values, with masa's q/k/v atoms and
coefficients), attention output (W_o with masa's o atoms), FFN, LayerNorms, the pooler and
the MLM head. "encoder total" is what BERT and Hugging Face's `BertModel` count
(embeddings, layers and pooler, without the MLM head).

With --config the report shows that variant beside `standard` of the same size; with --all
one table of all variants, each from its own `configs/<variant>_base.py` (in the directory
of --config, default the repository's configs/) with the same preset and the same
--config.model.* overrides. Paper figures are shown beside the ones they state, when the
model is BERT-base.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import dataclasses

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
from ml_collections import config_flags
import flax.linen as nn

from sharedbert.errors import UserError, one_line_errors
from sharedbert.utils import paths
from sharedbert.models import attention as attention_lib
from sharedbert.models.bert import BertForPretraining, ModelConfig

FLAGS = flags.FLAGS


def _define_flags():
  """Only when run as a command: importing this module defines no flags."""
  config_flags.DEFINE_config_file('config', None, 'Experiment config file (see configs/).',
                                  lock_config=True)
  flags.DEFINE_bool('all', False, 'One table of all attention variants.')
  flags.DEFINE_bool('verbose', False, 'Show tracebacks of user errors.')

ENCODER_COMPONENTS = ('embeddings', 'attention QKV', 'attention output', 'FFN', 'LayerNorms',
                      'pooler')
COMPONENTS = ENCODER_COMPONENTS + ('MLM head',)

# BERT-base, the size the papers report on.
BERT_BASE = dict(num_layers=12, hidden_size=768, num_heads=12, mlp_dim=3072, vocab_size=30522,
                 max_position_embeddings=512, type_vocab_size=2)

_NORM_NAMES = ('LayerNorm', 'attention_norm', 'output_norm', 'final_norm')


def component(path: tuple[str, ...], variant=attention_lib.AttentionBase) -> str:
  """The component of the parameter at `path` (module names, then the parameter's name).

  variant: the attention class, which names W_o's parameters (`output_names`). The layers
  are bert/layer_<i>, or bert/layers when scanned (model.scan_layers).

  Args:
    path: the parameter's path.
    variant: as above.
  Returns:
    One of COMPONENTS ('embeddings', 'attention QKV', 'attention output', 'FFN',
    'LayerNorms', 'pooler', 'MLM head').
  """
  top = path[0]
  if top == 'mlm_head':
    return 'MLM head'
  if top != 'bert' or len(path) < 3:
    raise ValueError(f'parameter {"/".join(path)} belongs to no component')
  part = path[1]
  if part == 'pooler':
    return 'pooler'
  if any(name in _NORM_NAMES for name in path):
    return 'LayerNorms'
  if part == 'embeddings':
    return 'embeddings'
  if part == 'shared_attention':  # Cross-layer params (masa): bert/shared_attention/<name>/...
    return 'attention output' if path[2] in variant.output_names else 'attention QKV'
  if part.startswith('layer_') or part == 'layers':
    if path[2] == 'mlp':
      return 'FFN'
    if path[2] == 'attention':
      return 'attention output' if path[3] in variant.output_names else 'attention QKV'
  raise ValueError(f'parameter {"/".join(path)} belongs to no component')


def abstract_params(model_cfg: ModelConfig):
  """The pretraining model's parameters as shapes (jax.eval_shape: nothing is allocated).

  Args:
    model_cfg: the ModelConfig.
  Returns:
    BertForPretraining's params tree of jax.ShapeDtypeStruct.
  """
  model = BertForPretraining(model_cfg)
  ids = jnp.zeros((1, 1), jnp.int32)

  def init():
    return model.init(jax.random.key(0), ids, ids, jnp.ones_like(ids), ids)['params']
  return nn.unbox(jax.eval_shape(init))


def parameter_counts(model_cfg: ModelConfig) -> dict[str, int]:
  """Parameters per component, counted on the real tree.

  Args:
    model_cfg: the ModelConfig.
  Returns:
    {component: count}, with 'encoder total' (BertModel) and 'total' (with the MLM head).
  """
  counts = dict.fromkeys(COMPONENTS, 0)
  variant = attention_lib.VARIANTS[model_cfg.attention]
  leaves = jax.tree_util.tree_flatten_with_path(abstract_params(model_cfg))[0]
  for path, leaf in leaves:
    names = tuple(str(getattr(k, 'key', k)) for k in path)
    size = 1
    for dim in leaf.shape:
      size *= int(dim)
    counts[component(names, variant)] += size
  counts['encoder total'] = sum(counts[c] for c in ENCODER_COMPONENTS)
  counts['total'] = counts['encoder total'] + counts['MLM head']
  return counts


def check_formula(model_cfg: ModelConfig, counts: dict[str, int]) -> str:
  """Compares the tree's attention counts with the variant's closed form (`param_formula`);
  a difference is a bug in the one or the other, so it raises. Returns a line for reports.

  Args:
    model_cfg: the ModelConfig.
    counts: parameter_counts'.
  Returns:
    The line.
  Raises:
    ValueError: the counts and the closed form differ.
  """
  formula = attention_lib.VARIANTS[model_cfg.attention].param_formula(model_cfg)
  if formula is None:
    return ''
  tree = (counts['attention QKV'], counts['attention output'])
  if tuple(formula) != tree:
    raise ValueError(f'{model_cfg.attention}: the parameter tree has (attention QKV, output) = '
                     f'{tree}, its param_formula says {tuple(formula)}')
  return 'attention counts agree with the variant\'s closed form (param_formula).'


def reduction(value: int, reference: int) -> float:
  """How much smaller `value` is than `reference`, in percent.

  Args:
    value: a count.
    reference: the reference count.
  Returns:
    100 * (1 - value / reference).
  """
  return 100.0 * (reference - value) / reference


def is_bert_base(model_cfg: ModelConfig) -> bool:
  """Whether `model_cfg` has BERT-base's sizes (the papers' reference point).

  Args:
    model_cfg: the ModelConfig.
  Returns:
    Whether L, D, heads, FFN and vocabulary are BERT-base's.
  """
  return all(getattr(model_cfg, k) == v for k, v in BERT_BASE.items())


def settings_text(model_cfg: ModelConfig) -> str:
  """The variant's own settings, in a few characters.

  Args:
    model_cfg: the ModelConfig.
  Returns:
    The variant's settings_text.
  """
  return attention_lib.VARIANTS[model_cfg.attention].settings_text(model_cfg)


def paper_text(model_cfg: ModelConfig, short: bool = False) -> str:
  """The paper's stated figures for this variant at BERT-base ('' where there are none).

  Args:
    model_cfg: the ModelConfig.
    short: one line for the table of all variants.
  Returns:
    The text.
  """
  variant = attention_lib.VARIANTS[model_cfg.attention]
  entry = variant.paper_figures
  if entry is None or not is_bert_base(model_cfg) or not variant.paper_applies(model_cfg):
    return ''
  source, figures, total = entry
  labels = {'qkv': 'QKV', 'attention': 'attention', 'total': 'total'}
  parts = [f'{labels[k]} -{v:g}%' for k, v in figures.items()]
  if total:
    parts.append(total)
  text = ', '.join(parts)
  return text if short else f'{text} ({source})'


def size_text(model_cfg: ModelConfig) -> str:
  """The model's sizes in one line: 'L=.., D=.., heads=.., FFN=.., ...'.

  Args:
    model_cfg: the ModelConfig.
  Returns:
    The line.
  """
  c = model_cfg
  return (f'L={c.num_layers}, D={c.hidden_size}, heads={c.num_heads}, FFN={c.mlp_dim}, '
          f'vocabulary={c.vocab_size}, positions={c.max_position_embeddings}')


def _table(header: list[str], rows: list[list[str]], left: int = 1,
           text_last: bool = False) -> str:
  """Columns padded to their widest cell; the first `left` (and a text last) left-aligned."""
  widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
  def line(cells):
    return '  '.join(c.ljust(w) if i < left or (text_last and i == len(cells) - 1)
                     else c.rjust(w)
                     for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
  return '\n'.join([line(header), line(['-' * w for w in widths])] + [line(r) for r in rows])


def report(model_cfg: ModelConfig) -> str:
  """One variant's counts beside `standard` of the same size.

  Args:
    model_cfg: the ModelConfig.
  Returns:
    The report, as text.
  """
  counts = parameter_counts(model_cfg)
  name = model_cfg.attention
  standard = (counts if name == 'standard' else
              parameter_counts(_with_attention(model_cfg, 'standard')))
  agrees = check_formula(model_cfg, counts)
  rows = []
  for key in COMPONENTS[:-1] + ('encoder total', 'MLM head', 'total'):
    label = {'encoder total': 'encoder total (BertModel)',
             'total': 'total with MLM head'}.get(key, key)
    row = [label, f'{counts[key]:,}']
    if name != 'standard':
      change = reduction(counts[key], standard[key])
      row += [f'{standard[key]:,}', f'-{change:.2f}%' if change else '']
    rows.append(row)
  header = ['component', name] + (['standard', 'reduction'] if name != 'standard' else [])
  settings = settings_text(model_cfg)
  lines = [f'Parameters of {name} attention{f" ({settings})" if settings else ""}; '
           f'{size_text(model_cfg)}. Counted from the parameter tree.', '',
           _table(header, rows)]
  if name != 'standard':
    attention = counts['attention QKV'] + counts['attention output']
    attention_std = standard['attention QKV'] + standard['attention output']
    lines += ['', f'attention block (QKV + output): {attention:,} vs {attention_std:,}, '
              f'-{reduction(attention, attention_std):.2f}%']
  paper = paper_text(model_cfg)
  if paper:
    lines += [f'paper\'s stated figures: {paper}']
  if agrees:
    lines += [agrees]
  return '\n'.join(lines)


def report_all(model_cfgs: list[ModelConfig]) -> str:
  """One table of all variants, reductions against the `standard` among them.

  Args:
    model_cfgs: one ModelConfig a variant, `standard` among them.
  Returns:
    The table, as text.
  """
  counts = {c.attention: parameter_counts(c) for c in model_cfgs}
  for c in model_cfgs:
    check_formula(c, counts[c.attention])
  if 'standard' not in counts:
    raise UserError('the --all table needs the standard variant as its reference')
  std = counts['standard']
  std_attention = std['attention QKV'] + std['attention output']

  def minus(value, ref):
    change = reduction(value, ref)
    return f'-{change:.2f}%' if change else '0'

  rows = []
  for c in model_cfgs:
    n = counts[c.attention]
    attention = n['attention QKV'] + n['attention output']
    rows.append([c.attention, settings_text(c), f'{n["attention QKV"]:,}',
                 f'{n["attention output"]:,}', f'{n["encoder total"]:,}',
                 minus(n['attention QKV'], std['attention QKV']),
                 minus(attention, std_attention), minus(n['encoder total'], std['encoder total']),
                 paper_text(c, short=True)])
  header = ['variant', 'settings', 'attention QKV', 'attention out', 'encoder total',
            'QKV', 'attention', 'total', 'paper states']
  table = _table(header, rows, left=2, text_last=True)
  lines = [f'Parameters by attention variant; {size_text(model_cfgs[0])}.',
           'Counted from the parameter trees; encoder total = embeddings + layers + pooler '
           '(BertModel), without the MLM head;',
           'QKV / attention (QKV + output) / total: reduction against standard.', '', table]
  sources = sorted({attention_lib.VARIANTS[c.attention].paper_figures[0] for c in model_cfgs
                    if paper_text(c, short=True)})
  if sources:
    lines += ['', 'paper states: ' + '; '.join(sources)]
  return '\n'.join(lines)


def _with_attention(model_cfg: ModelConfig, attention: str) -> ModelConfig:
  return dataclasses.replace(model_cfg, attention=attention)


# ---------------------------------------------------------------------------------------
# Command line.

def _repo_configs_dir() -> str:
  return os.path.join(paths.REPO_ROOT, 'configs')


def load_config_file(path: str, arg: str | None):
  """get_config(arg) of a config file, loaded by path (configs/ is not a package).

  Args:
    path: a config file.
    arg: what follows its colon, or None.
  Returns:
    The ConfigDict.
  """
  if not os.path.isfile(path):
    raise UserError(f'config file {path} does not exist')
  spec = importlib.util.spec_from_file_location(
      f'_sharedbert_config_{os.path.basename(path)[:-3]}', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def variant_configs(config_path: str | None, arg: str | None, overrides: dict) -> list:
  """Each variant's ModelConfig from configs/<variant>_base.py, with the given overrides.

  Args:
    config_path: a config file, or None for every variant's.
    arg: its preset.
    overrides: {key: value} applied to each model section.
  Returns:
    ModelConfigs.
  """
  directory = os.path.dirname(config_path) if config_path else _repo_configs_dir()
  out = []
  for variant in attention_lib.VARIANTS:
    path = os.path.join(directory, f'{variant}_base.py')
    if not os.path.isfile(path):
      raise UserError(f'--all needs {path} (one config file per variant); pass --config='
                      'a file in the directory that holds them')
    config = load_config_file(path, arg)
    for key, value in overrides.items():
      if key.startswith('model.') and key != 'model.attention':
        config.model[key[len('model.'):]] = copy.deepcopy(value)
    out.append(ModelConfig.from_config(config.model))
  return out


def _split_config_arg(filename: str) -> tuple[str, str | None]:
  path, _, arg = filename.partition(':')
  return path, arg or None


def run() -> str:
  """The parameter report for --config (or --all variants), as text.

  Returns:
    The report.
  """
  if FLAGS.all:
    path, arg, overrides = None, None, {}
    if FLAGS.config is not None:
      path, arg = _split_config_arg(config_flags.get_config_filename(FLAGS['config']))
      overrides = config_flags.get_override_values(FLAGS['config'])
    return report_all(variant_configs(path, arg, overrides))
  if FLAGS.config is None:
    raise UserError('pass --config=configs/<variant>_base.py[:preset], or --all')
  return report(ModelConfig.from_config(FLAGS.config.model))


def main(argv):
  """`sharedbert params`: prints the report.

  Args:
    argv: absl's (the program name only).
  Returns:
    None.
  """
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  with one_line_errors('sharedbert params', FLAGS.verbose):
    print(run())


if __name__ == '__main__':
  _define_flags()
  from sharedbert import cli
  app.run(main, flags_parser=cli.flags_parser('sharedbert params', 'sharedbert.models.params'))
