r"""From a pretrained `standard` checkpoint to `shared`, `symmetric`, `kv_shared` or `masa`
attention.

  python -m sharedbert.convert.shared --source=STANDARD_WORKDIR --target=NEW_WORKDIR \
      --attention=shared [--fit=function|rank1]
  python -m sharedbert.convert.shared --source=STANDARD_WORKDIR --target=NEW_WORKDIR \
      --attention=masa [--masa_atoms=0] [--masa_projections=qkvo]

shared, --fit=function (the default): per layer and head, fitted to what attention
computes: the symmetrised score form [W_q; b_q][W_k; b_k]^T and the value path W_v W_o
(sharedbert/models/fit.py, `fit_shared_function`, derives it).

symmetric, --fit=function (the default): per head, the best positive semi-definite rank-H
fit of the same symmetrised score form; values kept. --fit=mean: W_qk = (W_q + W_k) / 2.

--fit_text=TEXT weights both function fits by where each layer's inputs lie on real text
(the second moment of [x 1] over a fixed sample of TEXT's training paragraphs, through the
source model): the fit then minimises the expected squared error of the scores and values
on such inputs instead of treating every input direction alike (what it buys on a real
encoder: docs/checkpoints.md).

shared, --fit=rank1: for each layer, W_s, b_s, d_q, d_k, d_v minimise
  sum over r in (q, k, v) of ||[W_r; b_r] - [W_s; b_s] diag(d_r)||_F^2,
which splits into one problem per output unit j: the (D+1) x 3 matrix whose columns are
unit j's weights and bias in W_q, W_k, W_v, approximated with rank one. Its top singular
pair is the exact least-squares answer (Eckart-Young); the diagonals are scaled so that
||(d_q, d_k, d_v)_j|| = sqrt(3), i.e. all ones where the three roles agree.

--fit=fresh (any variant): nothing is fitted; attention is initialised as a new model of
the variant would be (--seed), everything else copied: the control that shows what a fit is
worth once training continues (sharedbert.lab.uptrain).

kv_shared: per layer and head, K = V = x W_kv fitted to what attention computes, the score
form [W_q; b_q] W_k^T and the value path W_v W_o (sharedbert/models/fit.py,
`fit_kv_shared`, derives it).

masa (matrix PCA, as Zhussip et al. do for pretrained models): for each projection type,
the L layers' matrices, flattened, form the rows of X [L, D*D]; the atoms are the top-S
principal matrices (right singular vectors of X, about the origin: W_l = sum_s c_ls A_s
has no separate mean matrix, and the uncentred truncated SVD is then its least-squares
optimum), and the coefficients are the projections c_ls = <W_l, A_s>. Atoms are rescaled
so that the coefficients are of order one, like a freshly initialised masa model. S <= L;
S = L is exact. Biases are copied per layer.

The command prints the relative reconstruction error ||W - W_fit||_F / ||W||_F of every
layer (and role or type), and writes NEW_WORKDIR (config.json with the new variant, a
step-0 checkpoint that `sharedbert.main` resumes from, and the source's vocabulary:
vocab.model, or vocab.txt and tokenizer_config.json).
Everything outside attention is copied unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
import os

from absl import app
from absl import flags
from absl import logging
from flax import linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from sharedbert.convert import hf as convert_hf
from sharedbert.config import validation
from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.errors import UserError, one_line_errors
from sharedbert.models import attention as attention_lib
from sharedbert.models.bert import BertForPretraining, ModelConfig
from sharedbert.models.layout import to_layout, unstack_layers
from sharedbert.data import sources
from sharedbert.evaluators import sts
from sharedbert.models import fit as fit_lib

FLAGS = flags.FLAGS


def _define_flags():
  """Only when run as a command: importing this module defines no flags."""
  flags.DEFINE_string('source', None, 'Workdir of a trained (or imported) standard model.')
  flags.DEFINE_string('target', None, 'New workdir for the converted model.')
  flags.DEFINE_enum('attention', None, convertible_variants(), 'The variant to convert to.')
  flags.DEFINE_integer('masa_atoms', 0, 'masa: atoms per projection type (0: ceil(L/3)).')
  flags.DEFINE_string('masa_projections', 'qkvo', 'masa: projection types from the dictionary.')
  flags.DEFINE_string('fit', None, "How attention is fitted: shared 'function' (default) or "
                      "'rank1'; symmetric 'function' (default) or 'mean'; any variant "
                      "'fresh' (no fit: attention newly initialised, a control).")
  flags.DEFINE_integer('seed', 0, '--fit=fresh: the initialisation seed.')
  flags.DEFINE_string('fit_text', None, 'Text (a .txt file or a folder of them) whose '
                      'paragraphs weight the function fits by where the layer inputs lie.')
  flags.DEFINE_integer('fit_texts', 2000, 'Paragraphs of --fit_text used (a fixed sample).')
  flags.DEFINE_integer('step', None, 'The source checkpoint step (default: the latest).')
  flags.DEFINE_bool('verbose', False, 'Show tracebacks of user errors.')

# ---------------------------------------------------------------------------------------
# Whole models and workdirs.

def convert_params(params: dict, source_cfg: ModelConfig, target_cfg: ModelConfig,
                   fit: str | None = None) -> tuple[dict, list[list[str]], list[str]]:
  """Standard params -> target variant's params; returns (params, table rows, header).

  Args:
    params: a standard model's pretraining tree (layers unstacked).
    source_cfg, target_cfg: the two ModelConfigs.
    fit: the target variant's fit, or None for its default.
  Returns:
    (params, table rows, header).
  """
  if source_cfg.attention != 'standard':
    raise UserError(f'the source checkpoint is {source_cfg.attention!r}; convert_shared '
                    'starts from a standard one')
  out, conversion = _convert(params, source_cfg, target_cfg, fit)
  return out, conversion.rows, conversion.header


def _convert(params, source_cfg, target_cfg, fit=None,
             moments=None) -> tuple[dict, fit_lib.Conversion]:
  """The target variant's class fits its attention (`from_standard`); the rest is copied."""
  out = copy.deepcopy(params)
  layers = [params['bert'][f'layer_{i}']['attention'] for i in range(source_cfg.num_layers)]
  fit = attention_lib.VARIANTS[target_cfg.attention].from_standard(layers, target_cfg, fit,
                                                                   moments)
  for i, attention in enumerate(fit.layers):
    out['bert'][f'layer_{i}']['attention'] = attention
  if fit.shared is not None:
    out['bert']['shared_attention'] = fit.shared
  return out, fit


FRESH = 'fresh'  # Not a fit: the control arm of the uptraining (sharedbert.lab.uptrain).


def fresh_attention(params: dict, target_cfg: ModelConfig, seed: int = 0) -> dict:
  """`params` (a standard model's, layers unstacked) with every attention parameter replaced
  by a fresh initialisation of `target_cfg`'s variant (seed `seed`); the rest is copied.

  Args:
    params: as above.
    target_cfg: the target's ModelConfig.
    seed: the init's seed.
  Returns:
    The target's params.
  """
  ids = jnp.zeros((1, 1), jnp.int32)
  model = BertForPretraining(dataclasses.replace(target_cfg, scan_layers=False))
  init = nn.unbox(model.init(jax.random.key(seed), ids, ids, jnp.ones_like(ids), ids))
  init = jax.tree.map(np.asarray, init['params'])
  out = copy.deepcopy(params)
  for i in range(target_cfg.num_layers):
    out['bert'][f'layer_{i}']['attention'] = init['bert'][f'layer_{i}']['attention']
  if 'shared_attention' in init['bert']:
    out['bert']['shared_attention'] = init['bert']['shared_attention']
  return out


def input_moments(source_cfg: ModelConfig, params: dict, tokenizer, texts,
                  seq_len: int = 64) -> list:
  """Each layer's input second moment E[[x 1]^T [x 1]] on `texts`, through the source model
  (sharedbert.models.fit.input_moments), for --fit_text.

  Args:
    source_cfg: the standard ModelConfig.
    params: its params.
    tokenizer: its vocabulary.
    texts: the paragraphs.
    seq_len: tokens a row.
  Returns:
    One (D+1) x (D+1) moment a layer.
  """
  if source_cfg.pre_layer_norm:
    raise UserError('--fit_text: the input moments are taken as a post-LN model\'s layer '
                    'inputs; this source is pre-LN')
  ids, segments, lengths = sts.tokenize(tokenizer, texts,
                                       min(seq_len, source_cfg.max_position_embeddings))
  hidden = []
  for i in range(0, len(ids), 256):  # Batches: the hidden states of every layer are kept.
    chunk = sts.hidden_states(source_cfg, params['bert'], ids[i:i + 256], segments[i:i + 256],
                              lengths[i:i + 256])
    hidden.append(fit_lib.input_moments(chunk, lengths[i:i + 256]))
    hidden[-1] = [m * int(lengths[i:i + 256].sum()) for m in hidden[-1]]
  total = int(lengths.sum())
  return [sum(parts) / total for parts in zip(*hidden)]


def sample_texts(path: str, count: int, split: str = 'train') -> list[str]:
  """A fixed sample (seed 0) of `count` paragraphs of a local text corpus, from the split
  the pretraining pipeline would call `split` (so 'eval' texts are never fitted on).

  Args:
    path: a local corpus.
    count: paragraphs.
    split: 'train' or 'eval'.
  Returns:
    The paragraphs.
  """
  docs = sources.split_documents(sources.local_documents(path), split, 0.05)
  if not docs:
    raise UserError(f'--fit_text={path} has no paragraphs in its {split} split')
  keep = np.random.default_rng(0).permutation(len(docs))[:count]
  return [docs[i] for i in sorted(keep)]


def convertible_variants() -> list[str]:
  """The variants whose class has a conversion from standard.

  Returns:
    Variant names.
  """
  base = attention_lib.AttentionBase.from_standard.__func__
  return [name for name, cls in attention_lib.VARIANTS.items()
          if cls.from_standard.__func__ is not base]


def target_model_config(source_cfg: ModelConfig, attention: str, masa_atoms: int = 0,
                        masa_projections: str = 'qkvo') -> ModelConfig:
  """The model config of `source_cfg` converted to another variant.

  Args:
    source_cfg: the standard model's ModelConfig.
    attention: the target variant.
    masa_atoms, masa_projections: masa's settings (ignored by other variants).
  Returns:
    The target's ModelConfig: the source's fields, the variant's settings at their
    defaults but for those given.
  Raises:
    UserError: an unknown variant, or a setting it refuses.
  """
  if attention not in attention_lib.VARIANTS:
    raise UserError(f'unknown attention variant {attention!r}; convert to one of '
                    f'{", ".join(convertible_variants())}')
  settings = {'masa_atoms': masa_atoms, 'masa_projections': masa_projections}
  own = attention_lib.VARIANTS[attention].config_keys
  cfg = dataclasses.replace(source_cfg, attention=attention,
                            **{k: v for k, v in settings.items() if k in own})
  cfg.validate()
  return cfg


def convert_workdir(source: str, target: str, attention: str, *, masa_atoms: int = 0,
                    masa_projections: str = 'qkvo', step: int | None = None,
                    fit: str | None = None, fit_text: str | None = None,
                    fit_texts: int = 2000, seed: int = 0) -> str:
  """Converts SOURCE's checkpoint into a new TARGET workdir.

  Args:
    source: a standard pretraining (or imported) workdir.
    target: the new workdir.
    attention: the target variant (convertible_variants()).
    masa_atoms, masa_projections: masa's settings.
    step: the source checkpoint's step; None: the latest.
    fit: the variant's fit (its conversion_fits), or 'fresh'; None: its default.
    fit_text: a corpus whose paragraphs weight the function fits.
    fit_texts: how many of its paragraphs.
    seed: the initialisation of --fit=fresh.
  Returns:
    The conversion report: what was done and, per layer, the fits' relative errors.
  """
  if os.path.abspath(source) == os.path.abspath(target):
    raise UserError('--target must be a new workdir, not --source')
  validation.workdir(target, '--target')
  source_cfg, params, meta, step = convert_hf.read_params(source, step)
  params = unstack_layers(params)  # The fits work layer by layer; the target keeps the layout.
  target_cfg = target_model_config(source_cfg, attention, masa_atoms, masa_projections)
  if source_cfg.attention != 'standard':
    raise UserError(f'the source checkpoint is {source_cfg.attention!r}; convert_shared '
                    'starts from a standard one')
  if fit == FRESH:
    if fit_text:
      raise UserError('--fit_text weights a fit; --fit=fresh fits nothing')
    new_params = to_layout(fresh_attention(params, target_cfg, seed), target_cfg.scan_layers)
    what = f'attention freshly initialised (seed {seed}), everything else copied'
    header, rows, errors_of = ['layer'], [], 'none: nothing is fitted'
  else:
    # A bad --fit before any work (and --fit_text with a fit it cannot weight).
    attention_lib.VARIANTS[attention].conversion_fit(fit, [] if fit_text else None)
    moments = None
    if fit_text:
      tokenizer = tokenizer_lib.load_workdir(source)
      moments = input_moments(source_cfg, params, tokenizer, sample_texts(fit_text, fit_texts))
    new_params, fitted = _convert(params, source_cfg, target_cfg, fit, moments)
    new_params = to_layout(new_params, target_cfg.scan_layers)
    header, rows, what, errors_of = fitted.header, fitted.rows, fitted.what, fitted.errors_of

  config = convert_hf.read_workdir_config(source)
  config.model.attention = target_cfg.attention
  for key, value in target_cfg.variant_settings:  # The target variant's own settings.
    config.model[key] = value
  convert_hf.write_checkpoint(
      target, config, new_params, vocab_size=meta.get('vocab_size'),
      source=f'{attention} fitted by sharedbert.convert.shared to {os.path.abspath(source)} '
             f'step {step}')
  # The vocabulary comes along: vocab.model, or vocab.txt + tokenizer_config.json.
  tokenizer_lib.copy_vocab(source, target)

  widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
  fmt = lambda cells: '  '.join(c.rjust(w) for c, w in zip(cells, widths))
  lines = [f'{source} (standard, step {step}) -> {target} ({attention}): {what}.']
  if rows:
    lines += [f'Relative reconstruction error ||W - W_fit||_F / ||W||_F ({errors_of}):',
              fmt(header), fmt(['-' * w for w in widths])] + [fmt(r) for r in rows]
  return '\n'.join(lines)


def main(argv):
  """`sharedbert convert_shared`: --source converted to --attention, written to --target.

  Args:
    argv: absl's (the program name only).
  Returns:
    None.
  """
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  logging.set_verbosity(logging.WARNING)  # Orbax's INFO chatter.
  with one_line_errors('sharedbert convert_shared', FLAGS.verbose):
    if not (FLAGS.source and FLAGS.target and FLAGS.attention):
      raise UserError('--source, --target and --attention are required')
    print(convert_workdir(FLAGS.source, FLAGS.target, FLAGS.attention,
                          masa_atoms=FLAGS.masa_atoms, masa_projections=FLAGS.masa_projections,
                          step=FLAGS.step, fit=FLAGS.fit, fit_text=FLAGS.fit_text,
                          fit_texts=FLAGS.fit_texts, seed=FLAGS.seed))


if __name__ == '__main__':
  _define_flags()
  from sharedbert import cli
  app.run(main, flags_parser=cli.flags_parser('sharedbert convert_shared',
                                              'sharedbert.convert.shared'))
