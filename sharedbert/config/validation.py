"""The valid range of every config key, checked before a command writes anything.

The tables of ranges and `model` (every command that builds a model, through
`ModelConfig.validate`); the checks of a whole config (`pretrain`, `glue`, `study`),
which build models and read the study's plan, are sharedbert/config/checks.py, so that
this module imports nothing of sharedbert's but errors (ModelConfig imports it). Each
key's range is written once, in the tables below, and a value outside it is a UserError
that names both: `data.batch_size must be a positive integer, got -4`.

Only the values are checked here; what needs the machine or the files (the mesh against
the devices, the corpus, the workdir) is checked by each command's preflight, also before
it writes anything.
"""

from __future__ import annotations

import math
import numbers
import os
import tempfile
from typing import Any, Callable, Mapping
import dataclasses

from sharedbert.errors import UserError

# sharedbert.data.tokenizer.NUM_SPECIAL ([PAD] <unk> [CLS] [SEP] [MASK]), not imported so
# that checking a config loads neither sentencepiece nor TensorFlow.
NUM_SPECIAL_TOKENS = 5


class Range:
  """A set of valid values and how to say it ('a positive integer')."""

  def __init__(self, text: str, test: Callable[[Any], bool]):
    self.text = text
    self.test = test

  def check(self, key: str, value):
    """Raises a UserError naming `key`, the range and `value` when value is out of range."""
    try:
      ok = bool(self.test(value))
    except (TypeError, ValueError):
      ok = False
    if not ok:
      raise UserError(f'{key} must be {self.text}, got {value!r}')


def _is_int(v) -> bool:
  return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_number(v) -> bool:
  return (isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v))


def integer(low: int | None = None, high: int | None = None, text: str | None = None) -> Range:
  """A Range of integers in [low, high] (either end open when None), said as `text`.

  Args:
    low, high: the ends (None: open).
    text: the range in words (default: from the ends).
  Returns:
    The Range.
  """
  if text is None:
    if low == 1 and high is None:
      text = 'a positive integer'
    elif high is None:
      text = f'an integer >= {low}'
    else:
      text = f'an integer from {low} to {high}'
  return Range(text, lambda v: _is_int(v) and (low is None or v >= low)
               and (high is None or v <= high))


def number(low: float | None = None, high: float | None = None, *, low_open=False,
           high_open=False, text: str | None = None) -> Range:
  """A finite real number between `low` and `high` (open or closed ends).

  Args:
    low, high: the ends (None: open).
    low_open, high_open: exclude the end.
    text: the range in words.
  Returns:
    The Range.
  """
  if text is None:
    if high is None and low is None:
      text = 'a finite number'
    elif high is None:
      text = f'a finite number {">" if low_open else ">="} {low:g}'
    else:
      text = (f'a number in {"(" if low_open else "["}{low:g}, {high:g}'
              f'{")" if high_open else "]"}')

  def test(v):
    if not _is_number(v):
      return False
    if low is not None and (v <= low if low_open else v < low):
      return False
    return high is None or (v < high if high_open else v <= high)
  return Range(text, test)


def one_of(*choices) -> Range:
  """A Range that holds exactly `choices`.

  Args:
    *choices: the values.
  Returns:
    The Range.
  """
  return Range(f'one of {", ".join(repr(c) for c in choices)}', lambda v: v in choices)


POSITIVE = integer(1)
NON_NEGATIVE = integer(0)
BOOL = Range('True or False', lambda v: isinstance(v, bool))
TEXT = Range('a non-empty string', lambda v: isinstance(v, str) and v.strip() != '')
STRING = Range('a string', lambda v: isinstance(v, str))
FRACTION_OPEN = number(0, 1, low_open=True, high_open=True)   # (0, 1)
RATE = number(0, 1, high_open=True)                           # [0, 1)
LEARNING_RATE = number(0, low_open=True)                      # > 0
ADAM_BETA = number(0, 1, high_open=True)
MESH_AXIS = Range('a positive integer, or -1 for all devices the other axes leave',
                  lambda v: _is_int(v) and (v >= 1 or v == -1))


# ---------------------------------------------------------------------------------------
# The tables: key -> range. Keys a config lacks are not checked (the converters' and old
# workdirs' configs may predate a key).

MODEL = {
    'vocab_size': integer(NUM_SPECIAL_TOKENS + 1, text=f'an integer >= '
                          f'{NUM_SPECIAL_TOKENS + 1} (the {NUM_SPECIAL_TOKENS} special '
                          'tokens and at least one piece)'),
    'hidden_size': POSITIVE,
    'num_layers': POSITIVE,
    'num_heads': POSITIVE,
    'mlp_dim': POSITIVE,
    'max_position_embeddings': POSITIVE,
    'type_vocab_size': POSITIVE,
    'dropout_rate': RATE,
    'attention_dropout_rate': RATE,
    'initializer_range': number(0, low_open=True),
    'layer_norm_eps': number(0, low_open=True),
    'pre_layer_norm': BOOL,
    'scan_layers': BOOL,
    'one_hot_embeddings': BOOL,
    'causal': BOOL,
    'position_embeddings': one_of('learned', 'rotary', 'none'),
    'rope_theta': number(1, low_open=True),
    'rope_query_phase': number(),
}

# Learning rates, betas, eps and clipping: shared by pretraining and fine-tuning.
OPTIM = {
    'lr': LEARNING_RATE,
    'weight_decay': number(0),
    'b1': ADAM_BETA,
    'b2': ADAM_BETA,
    'eps': number(0, low_open=True),
    'grad_clip_norm': number(0, low_open=True),
}

MESH = {'data': MESH_AXIS, 'fsdp': MESH_AXIS, 'tensor': MESH_AXIS}

# The train state counts steps in int32 (and the schedule reads them there).
MAX_STEPS = 2**31 - 1
STEPS = integer(1, MAX_STEPS, text=f'a positive integer up to {MAX_STEPS:,} (steps are counted '
                'in int32)')

PRETRAIN = {
    'seed': NON_NEGATIVE,
    'restart': BOOL,
    'total_steps': STEPS,
    'log_every_steps': POSITIVE,
    'eval_every_steps': POSITIVE,
    'eval_batches': integer(0, text='an integer >= 0 (0: every held-out batch)'),
    'data.corpus': TEXT,
    'data.tfds_data_dir': STRING,
    'data.tfds_text_key': TEXT,
    'data.seq_len': integer(2, text='an integer >= 2 ([CLS] and one token)'),
    'data.batch_size': POSITIVE,
    'data.mask_rate': FRACTION_OPEN,
    'data.max_predictions': integer(0, text='an integer >= 0 (0: ceil(mask_rate * seq_len))'),
    'data.eval_mask_rate': FRACTION_OPEN,
    'fill_mask_examples': Range('a list of sentences, each with [MASK]', lambda v: isinstance(
        v, (tuple, list)) and all(isinstance(t, str) and '[MASK]' in t for t in v)),
    'data.eval_fraction': FRACTION_OPEN,
    'data.vocab_train_sentences': POSITIVE,
    'data.vocab_model_type': one_of('unigram', 'bpe', 'char', 'word'),
    'data.shuffle_buffer': POSITIVE,
    **{f'optim.{k}': r for k, r in OPTIM.items()},
    'optim.warmup_steps': integer(0, MAX_STEPS, text=f'an integer in [0, {MAX_STEPS:,}]'),
    'optim.schedule_steps': integer(0, MAX_STEPS, text=f'an integer in [0, {MAX_STEPS:,}] '
                                    '(0: total_steps)'),
    'optim.grad_accum_steps': POSITIVE,
    'optim.max_skipped_steps': POSITIVE,
    **{f'mesh.{k}': r for k, r in MESH.items()},
    'ckpt.every_steps': POSITIVE,
    'ckpt.max_to_keep': integer(1, text='a positive integer (the newest checkpoints kept)'),
    'ckpt.async_save': BOOL,
}

GLUE = {
    'init_from': Range('the --workdir of a pretraining run (it holds config.json, vocab.model '
                       'and checkpoints/)', lambda v: isinstance(v, str) and v.strip() != ''),
    'task': Range('a GLUE task name (cola, sst2, ...), a comma-separated list, or all',
                  lambda v: isinstance(v, str) and v.strip(' ,') != ''),
    'seeds': POSITIVE,
    'seed': NON_NEGATIVE,
    'from_scratch': BOOL,
    'pooling': one_of('cls', 'mean'),
    'data.glue_dir': STRING,
    'data.tfds_data_dir': STRING,
    'data.seq_len': integer(3, text='an integer >= 3 ([CLS] a [SEP])'),
    'data.max_train_examples': integer(0, text='an integer >= 0 (0: all)'),
    'data.skip_malformed': BOOL,
    **{f'optim.{k}': r for k, r in OPTIM.items()},
    'optim.warmup_fraction': RATE,
    'num_epochs': POSITIVE,
    'batch_size': POSITIVE,
    'log_every_steps': integer(0, text='an integer >= 0 (0: per epoch only)'),
    'eval.batch_size': POSITIVE,
    'eval.bootstrap_resamples': POSITIVE,
    'eval.confidence': FRACTION_OPEN,
    'eval.bootstrap_seed': NON_NEGATIVE,
    'eval.select_best_epoch': BOOL,
    'eval.predict_test': BOOL,
    'ckpt.max_to_keep': integer(0, text='an integer >= 0 (0: keep no fine-tuned model)'),
    **{f'mesh.{k}': r for k, r in MESH.items()},
}

STUDY = {
    'seeds': POSITIVE,
    'confidence': FRACTION_OPEN,
    'equivalence_margin': number(0, low_open=True),
    'bootstrap_resamples': POSITIVE,
    'robustness.noise_seeds': POSITIVE,
    'robustness.eval_batch_size': POSITIVE,
    'crossdomain.stsb_threshold': number(0, 5),
    'crossdomain.max_target_examples': integer(0, text='an integer >= 0 (0: all)'),
    'squad.seq_len': POSITIVE,
    'squad.doc_stride': POSITIVE,
    'squad.max_query_len': POSITIVE,
    'squad.max_answer_len': POSITIVE,
    'squad.n_best': POSITIVE,
    'squad.num_epochs': POSITIVE,
    'squad.batch_size': POSITIVE,
    'squad.lr': LEARNING_RATE,
    'squad.warmup_fraction': RATE,
    'squad.max_train_examples': integer(0, text='an integer >= 0 (0: all)'),
    'squad.max_eval_examples': integer(0, text='an integer >= 0 (0: all)'),
    'pretrain.seeds': POSITIVE,
    'pretrain.margin_nats': number(0, low_open=True),
    'pretrain.alpha': FRACTION_OPEN,
    'pretrain.width_seeds': POSITIVE,
    'pretrain.workers': POSITIVE,
    'linear_probe.max_train_examples': integer(0, text='an integer >= 0 (0: all)'),
    'linear_probe.seq_len': POSITIVE,
}

SQUAD_VERSIONS = ('1.1', '2.0')


# ---------------------------------------------------------------------------------------
# Checking.

def _lookup(config, path: str):
  """(found, value) of a dotted key in a ConfigDict or dict."""
  node = config
  for name in path.split('.'):
    try:
      if name not in node:
        return False, None
      node = node[name]
    except TypeError:  # A parent that is not a mapping.
      return False, None
  return True, node


def check_table(config, table: Mapping[str, Range], prefix: str = ''):
  """Checks every key of `table` that `config` has (its Range); missing keys are skipped.

  Args:
    config: a ConfigDict or dict.
    table: {dotted key: Range}.
    prefix: put before each key in messages.
  Raises:
    UserError: the first value out of range.
  Returns:
    None.
  """
  for key, valid in table.items():
    found, value = _lookup(config, key)
    if found:
      valid.check(prefix + key, value)


def model(model_cfg) -> None:
  """The ranges of config.model (a ConfigDict, dict or ModelConfig).

  The attention variant's own settings (masa_projections, ...) are checked by its class
  (`setting_ranges`, `check_config`); ModelConfig.validate runs all of them.

  Args:
    model_cfg: as above.
  Raises:
    UserError: the first value out of range.
  Returns:
    None.
  """
  if not isinstance(model_cfg, Mapping) and not hasattr(model_cfg, 'keys'):
    model_cfg = {f.name: getattr(model_cfg, f.name) for f in dataclasses.fields(model_cfg)}
  check_table(model_cfg, MODEL, 'model.')


def workdir(path: str, flag: str = '--workdir') -> None:
  """A directory a command will write: not empty, not a file (or under one), and writable
  where it is (or where it would be created): checked by creating and removing a temporary
  file there, which also catches a read-only filesystem that permission bits do not show.

  Args:
    path: the directory.
    flag: how messages name it.
  Raises:
    UserError: what is wrong with it.
  Returns:
    None.
  """
  path = os.fspath(path)
  if not path.strip():
    raise UserError(f'{flag} is empty; give the directory to write to (new or existing)')
  if '://' in path:
    return
  probe = os.path.abspath(path)
  while probe and not os.path.lexists(probe):
    parent = os.path.dirname(probe)
    if parent == probe:
      return
    probe = parent
  if not os.path.isdir(probe):
    what = 'is' if probe == os.path.abspath(path) else f'is under {probe}, which is'
    raise UserError(f'{flag} {path} {what} not a directory; {flag} must be a '
                    'directory (new or existing)')
  try:
    with tempfile.TemporaryFile(dir=probe, prefix='.sharedbert-write-check-'):
      pass
  except OSError as e:
    where = '' if probe == os.path.abspath(path) else f' (it would be created in {probe})'
    raise UserError(f'{flag} {path} cannot be written{where}: {e.strerror}; choose a '
                    'directory you can write to') from e


def output_file(path: str, flag: str) -> None:
  """A file a command will write: not a directory, in a directory that can be written.

  Args:
    path: the file.
    flag: how messages name it.
  Raises:
    UserError: what is wrong with it.
  Returns:
    None.
  """
  path = os.fspath(path)
  if '://' in path:
    return
  if os.path.isdir(path):
    raise UserError(f'{flag} {path} is a directory; give a file path')
  folder = os.path.dirname(os.path.abspath(path))
  try:
    workdir(folder, flag)
  except UserError as e:
    raise UserError(f'{flag} {path} cannot be written: its folder {folder} '
                    f'{str(e).split(" ", 2)[2]}') from e
