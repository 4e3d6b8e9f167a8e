r"""From a pretrained `standard` checkpoint to `shared` or `masa` attention, by least squares.

  python -m sharedbert.convert_shared --source=STANDARD_WORKDIR --target=NEW_WORKDIR \
      --attention=shared
  python -m sharedbert.convert_shared --source=STANDARD_WORKDIR --target=NEW_WORKDIR \
      --attention=masa [--masa_atoms=0] [--masa_projections=qkvo]

shared: for each layer, W_s, b_s, d_q, d_k, d_v minimise
  sum over r in (q, k, v) of ||[W_r; b_r] - [W_s; b_s] diag(d_r)||_F^2,
which splits into one problem per output unit j: the (D+1) x 3 matrix whose columns are
unit j's weights and bias in W_q, W_k, W_v, approximated with rank one. Its top singular
pair is the exact least-squares answer (Eckart-Young); the diagonals are scaled so that
||(d_q, d_k, d_v)_j|| = sqrt(3), i.e. all ones where the three roles agree.

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
import numpy as np

from sharedbert import convert_hf
from sharedbert import validation
from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.errors import UserError, one_line_errors
from sharedbert.models import attention as attention_lib
from sharedbert.models.bert import ModelConfig, to_layout, unstack_layers

FLAGS = flags.FLAGS


def _define_flags():
  """Only when run as a command: importing this module defines no flags."""
  flags.DEFINE_string('source', None, 'Workdir of a trained (or imported) standard model.')
  flags.DEFINE_string('target', None, 'New workdir for the converted model.')
  flags.DEFINE_enum('attention', None, convertible_variants(), 'The variant to convert to.')
  flags.DEFINE_integer('masa_atoms', 0, 'masa: atoms per projection type (0: ceil(L/3)).')
  flags.DEFINE_string('masa_projections', 'qkvo', 'masa: projection types from the dictionary.')
  flags.DEFINE_integer('step', None, 'The source checkpoint step (default: the latest).')
  flags.DEFINE_bool('verbose', False, 'Show tracebacks of user errors.')

ROLES = ('query', 'key', 'value')


def relative_error(target: np.ndarray, fit: np.ndarray) -> float:
  norm = np.linalg.norm(target)
  return float(np.linalg.norm(target - fit) / norm) if norm else float(np.linalg.norm(fit))


# ---------------------------------------------------------------------------------------
# shared: one layer.

def fit_shared(attention: dict) -> tuple[dict, dict[str, float]]:
  """A standard layer's attention params -> the shared layer's, and relative errors.

  attention: {'query'|'key'|'value': {'kernel' [D,N,H], 'bias' [N,H]}, 'out': ...}.
  Returns ({'shared': {'kernel', 'bias'}, 'diag' [3,N,H], 'out'}, errors) with errors for
  'qkv' (the three affine maps together) and each role.
  """
  kernels = np.stack([np.asarray(attention[r]['kernel'], np.float64) for r in ROLES])
  biases = np.stack([np.asarray(attention[r]['bias'], np.float64) for r in ROLES])
  _, d, n, h = kernels.shape
  # One (D+1) x 3 matrix per output unit: rows are inputs and the bias, columns the roles.
  m = np.concatenate([kernels.reshape(3, d, n * h), biases.reshape(3, 1, n * h)], axis=1)
  m = m.transpose(2, 1, 0)  # [N*H, D+1, 3]
  u, s, vt = np.linalg.svd(m, full_matrices=False)
  shared = u[:, :, 0] * s[:, :1]      # [N*H, D+1]
  diag = vt[:, 0, :]                  # [N*H, 3], unit norm
  # Fix the scale (all ones where the roles agree) and the sign (diagonals mostly positive).
  sign = np.where(diag.sum(axis=1) < 0, -1.0, 1.0)[:, None]
  dtype = np.asarray(attention['query']['kernel']).dtype
  # The errors are those of the stored values (after rounding to the parameter dtype).
  diag = (diag * sign * np.sqrt(3.0)).astype(dtype)
  shared = (shared * sign / np.sqrt(3.0)).astype(dtype)
  fit = shared[:, :, None].astype(np.float64) * diag[:, None, :]  # [N*H, D+1, 3]

  errors = {'qkv': relative_error(m, fit)}
  for i, role in enumerate(ROLES):
    errors[role] = relative_error(m[:, :, i], fit[:, :, i])
  out = {
      'shared': {'kernel': shared[:, :d].T.reshape(d, n, h),
                 'bias': shared[:, d].reshape(n, h)},
      'diag': diag.T.reshape(3, n, h),
      'out': copy.deepcopy(attention['out']),
  }
  return out, errors


# ---------------------------------------------------------------------------------------
# masa: the stack of layers.

def fit_atoms(matrices: np.ndarray, num_atoms: int) -> tuple[np.ndarray, np.ndarray, list[float]]:
  """Matrix PCA: [L, ...] matrices -> atoms [S, ...], coefficients [L, S], per-layer errors."""
  num_layers = matrices.shape[0]
  if not 1 <= num_atoms <= num_layers:
    raise UserError(f'masa_atoms={num_atoms} must be between 1 and the number of layers '
                    f'({num_layers}) to fit a pretrained stack (S = L is exact)')
  x = matrices.reshape(num_layers, -1).astype(np.float64)
  _, _, vt = np.linalg.svd(x, full_matrices=False)
  basis = vt[:num_atoms]                        # [S, P], orthonormal principal matrices
  coefficients = x @ basis.T                    # [L, S]: projections onto them
  # Atoms at the layers' RMS scale, coefficients of order one.
  scale = np.sqrt(np.mean(np.sum(x ** 2, axis=1))) or 1.0
  atoms = (basis * scale).astype(matrices.dtype)
  coefficients = (coefficients / scale).astype(matrices.dtype)
  # The errors are those of the stored values (after rounding to the parameter dtype).
  fit = coefficients.astype(np.float64) @ atoms
  errors = [relative_error(x[l], fit[l]) for l in range(num_layers)]
  return atoms.reshape(num_atoms, *matrices.shape[1:]), coefficients, errors


def fit_masa(layers: list[dict], cfg: ModelConfig) -> tuple[dict, list[dict], dict]:
  """Standard layers' attention params -> (dictionary, new per-layer attention, errors).

  errors: {type: [relative error of each layer]}.
  """
  num_atoms = attention_lib.masa_num_atoms(cfg)
  dictionary, errors = {}, {}
  new_layers = [copy.deepcopy(a) for a in layers]
  for t in cfg.masa_projections:
    name = attention_lib.MASA_TYPES[t]
    stack = np.stack([np.asarray(a[name]['kernel']) for a in layers])
    atoms, coefficients, errors[t] = fit_atoms(stack, num_atoms)
    dictionary[t] = {'atoms': atoms, 'coefficients': coefficients}
    for a in new_layers:
      del a[name]['kernel']  # The layer keeps its bias; the kernel is the dictionary's.
  return dictionary, new_layers, errors


# ---------------------------------------------------------------------------------------
# Whole models and workdirs.

def convert_params(params: dict, source_cfg: ModelConfig,
                   target_cfg: ModelConfig) -> tuple[dict, list[list[str]], list[str]]:
  """Standard params -> target variant's params; returns (params, table rows, header)."""
  if source_cfg.attention != 'standard':
    raise UserError(f'the source checkpoint is {source_cfg.attention!r}; convert_shared '
                    'starts from a standard one')
  out, fit = _convert(params, source_cfg, target_cfg)
  return out, fit.rows, fit.header


def _convert(params, source_cfg, target_cfg) -> tuple[dict, attention_lib.Conversion]:
  """The target variant's class fits its attention (`from_standard`); the rest is copied."""
  out = copy.deepcopy(params)
  layers = [params['bert'][f'layer_{i}']['attention'] for i in range(source_cfg.num_layers)]
  fit = attention_lib.VARIANTS[target_cfg.attention].from_standard(layers, target_cfg)
  for i, attention in enumerate(fit.layers):
    out['bert'][f'layer_{i}']['attention'] = attention
  if fit.shared is not None:
    out['bert']['shared_attention'] = fit.shared
  return out, fit


def convertible_variants() -> list[str]:
  """The variants whose class has a conversion from standard."""
  base = attention_lib.AttentionBase.from_standard.__func__
  return [name for name, cls in attention_lib.VARIANTS.items()
          if cls.from_standard.__func__ is not base]


def target_model_config(source_cfg: ModelConfig, attention: str, masa_atoms: int = 0,
                        masa_projections: str = 'qkvo') -> ModelConfig:
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
                    masa_projections: str = 'qkvo', step: int | None = None) -> str:
  """Converts SOURCE's checkpoint into a new TARGET workdir; returns the report."""
  if os.path.abspath(source) == os.path.abspath(target):
    raise UserError('--target must be a new workdir, not --source')
  validation.workdir(target)
  source_cfg, params, meta, step = convert_hf.read_params(source, step)
  params = unstack_layers(params)  # The fits work layer by layer; the target keeps the layout.
  target_cfg = target_model_config(source_cfg, attention, masa_atoms, masa_projections)
  if source_cfg.attention != 'standard':
    raise UserError(f'the source checkpoint is {source_cfg.attention!r}; convert_shared '
                    'starts from a standard one')
  new_params, fit = _convert(params, source_cfg, target_cfg)
  new_params = to_layout(new_params, target_cfg.scan_layers)
  header, rows = fit.header, fit.rows

  config = convert_hf.read_workdir_config(source)
  for key in ('attention', 'masa_atoms', 'masa_projections'):
    config.model[key] = getattr(target_cfg, key)
  convert_hf.write_checkpoint(
      target, config, new_params, vocab_size=meta.get('vocab_size'),
      source=f'{attention} fitted by sharedbert.convert_shared to {os.path.abspath(source)} '
             f'step {step}')
  # The vocabulary comes along: vocab.model, or vocab.txt + tokenizer_config.json.
  tokenizer_lib.copy_vocab(source, target)

  widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
  fmt = lambda cells: '  '.join(c.rjust(w) for c, w in zip(cells, widths))
  lines = [f'{source} (standard, step {step}) -> {target} ({attention}): {fit.what}.',
           f'Relative reconstruction error ||W - W_fit||_F / ||W||_F ({fit.errors_of}):',
           fmt(header), fmt(['-' * w for w in widths])] + [fmt(r) for r in rows]
  return '\n'.join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  logging.set_verbosity(logging.WARNING)  # Orbax's INFO chatter.
  with one_line_errors('sharedbert.convert_shared', FLAGS.verbose):
    if not (FLAGS.source and FLAGS.target and FLAGS.attention):
      raise UserError('--source, --target and --attention are required')
    print(convert_workdir(FLAGS.source, FLAGS.target, FLAGS.attention,
                          masa_atoms=FLAGS.masa_atoms, masa_projections=FLAGS.masa_projections,
                          step=FLAGS.step))


if __name__ == '__main__':
  _define_flags()
  from sharedbert import cli
  app.run(main, flags_parser=cli.flags_parser('sharedbert.convert_shared', 'sharedbert.convert_shared'))
