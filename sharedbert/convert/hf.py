r"""Hugging Face BERT checkpoints in and out of sharedbert's `standard` variant.

  python -m sharedbert.convert.hf import --hf_dir=HF_DIR --workdir=WORKDIR \
      [--config=configs/standard_base.py[:preset]]
  python -m sharedbert.convert.hf export --workdir=WORKDIR --hf_dir=HF_DIR [--step=N]

import reads what `BertForMaskedLM.save_pretrained` (or `BertModel`, `BertForPreTraining`)
writes: config.json and model.safetensors (or its shards). It writes WORKDIR as a training
run would: config.json (the recipe of --config, default configs/standard_base.py's, with
the model section taken from the Hugging Face config and `hf_checkpoint` set to HF_DIR) and
an orbax checkpoint at step 0 (parameters and a fresh optimizer state) that
`sharedbert.main` resumes from, `sharedbert.convert.shared` converts and export writes back.
A checkpoint without a pooler (BertForMaskedLM has none) or without an MLM head (BertModel)
gets those parts freshly initialised from config.seed; the command says which.

import also requires the tokenizer: a WordPiece vocab.txt (+ tokenizer_config.json for
do_lower_case), copied into WORKDIR as its vocabulary (sharedbert.data.tokenizer reads it
with the `tokenizers` library), so that restore, fine-tuning and continued pretraining
tokenize as Hugging Face does. Everything is checked before anything is written, and
WORKDIR is written beside its place and renamed into it.

export writes HF_DIR/config.json and model.safetensors in the layout BertForMaskedLM loads
(the decoder tied to the word embeddings), plus the pooler (`bert.pooler.dense.*`, which
BertModel and the classification models use; BertForMaskedLM reports it as unused), and a
tokenizer AutoTokenizer loads with no custom code (tokenizer.json, tokenizer_config.json,
special_tokens_map.json, and the vocabulary file) that gives sharedbert's ids. A fine-tuned
seed directory of sharedbert.tasks.finetune exports as BertForSequenceClassification. Only
`standard` models export. Pre-LN models (the budget recipe's) take the same path as
RobertaPreLayerNormForMaskedLM / ...ForSequenceClassification, built into transformers
(sharedbert/convert/hf_layout.py says how the layouts differ), and import reads them back.

The functions here are also the workdir helpers of the other converters: `read_params`
(the parameters of a workdir's checkpoint, without its optimizer state) and
`write_checkpoint` (a step-0 checkpoint in train.py's layout).
"""

from __future__ import annotations

import json
import os
import shutil

from absl import app
from absl import flags
from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
from ml_collections import config_flags
import numpy as np
from safetensors.numpy import load_file
from safetensors.numpy import save_file

from sharedbert import checkpoint as checkpoint_lib
from sharedbert.config import validation
from sharedbert.errors import UserError, one_line_errors
from sharedbert.convert import hf_custom
from sharedbert.convert import hf_layout
from sharedbert.convert import hf_tokenizer
from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.tasks import classifiers
from sharedbert.convert.hf_layout import (ARCHITECTURE_KEYS, Params, hf_config_from_model,
                                          hf_from_params,
                                  model_config_from_hf, params_from_hf)
from sharedbert.models import attention as attention_lib
from sharedbert.models.bert import BertForPretraining, ModelConfig
from sharedbert.models.layout import unstack_layers
from sharedbert import config as sb_config
from sharedbert import pretrain_step
from sharedbert import runs
from sharedbert import optim as optim_lib
from sharedbert.utils import atomic_dirs
from sharedbert.utils import workdir as workdir_lib

FLAGS = flags.FLAGS


def _define_flags():
  """Only when run as a command: importing this module defines no flags."""
  config_flags.DEFINE_config_file(
      'config', None, 'import: the recipe for WORKDIR/config.json (default: '
      'configs/standard_base.py); its model section is replaced by the checkpoint\'s.',
      lock_config=True)
  flags.DEFINE_string('hf_dir', None, 'The Hugging Face model directory (read or written).')
  flags.DEFINE_string('workdir', None, 'The sharedbert workdir (written or read).')
  flags.DEFINE_integer('step', None, 'export: the checkpoint step (default: the latest).')
  flags.DEFINE_bool('overwrite', False, 'export: replace a non-empty --hf_dir whole.')
  flags.DEFINE_bool('custom_code', False, 'export: write a standard model as sharedbert\'s '
                    'custom code too (every other variant always is).')
  flags.DEFINE_bool('verbose', False, 'Show tracebacks of user errors.')

# ---------------------------------------------------------------------------------------
# Files.

def read_hf_dir(hf_dir: str) -> tuple[dict, dict[str, np.ndarray]]:
  """(config.json as a dict, tensors) of a Hugging Face model directory.

  Args:
    hf_dir: the folder (model.safetensors, or pytorch_model.bin).
  Returns:
    (config, {name: array}).
  """
  config_path = os.path.join(hf_dir, 'config.json')
  if not os.path.isfile(config_path):
    raise UserError(f'{config_path} does not exist; --hf_dir must be a directory that '
                    'save_pretrained wrote')
  hf_config = _read_json(config_path)
  single = os.path.join(hf_dir, 'model.safetensors')
  index = os.path.join(hf_dir, 'model.safetensors.index.json')
  if os.path.isfile(single):
    files = [single]
  elif os.path.isfile(index):
    try:
      shards = sorted(set(_read_json(index)['weight_map'].values()))
    except (KeyError, TypeError, AttributeError):
      raise UserError(f'{index} has no "weight_map" of tensor names to files') from None
    files = [os.path.join(hf_dir, s) for s in shards]
  elif os.path.isfile(os.path.join(hf_dir, 'pytorch_model.bin')):
    raise UserError(f'{hf_dir} holds pytorch_model.bin only; save it as safetensors first '
                    '(transformers: model.save_pretrained(dir))')
  else:
    raise UserError(f'{hf_dir} has no model.safetensors (or model.safetensors.index.json)')
  tensors = {}
  for path in files:
    if not os.path.isfile(path):
      raise UserError(f'{path} does not exist (listed in {index}); copy every shard')
    try:
      tensors.update(load_file(path))
    except Exception as e:  # pylint: disable=broad-except
      # safetensors raises its own error (and OSError, ValueError) for a damaged file.
      first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise UserError(f'{path} is not a readable safetensors file ({first}); save or '
                      'download it again') from None
  return hf_config, tensors


def _read_json(path: str):
  try:
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise UserError(f'{path} is not valid JSON ({e}); save or download it again') from None


def write_hf_dir(hf_dir: str, cfg: ModelConfig, params: Params, *, head: dict | None = None,
                 head_params: Params | None = None):
  """config.json and model.safetensors: BertForMaskedLM, or with `head` (a fine-tuned
  classifier's description, see sharedbert.tasks.finetune) BertForSequenceClassification.

  Args:
    hf_dir: the folder to write.
    cfg: the ModelConfig (a `standard` one).
    params: the pretraining tree.
    head: a classifier's description, or None.
    head_params: its classifier's params.
  Returns:
    None.
  """
  hf_config = hf_config_from_model(cfg)
  if head is None:
    tensors = hf_from_params(params, cfg)
  else:
    tensors = hf_from_params(params, cfg, groups=('encoder', 'pooler'))
    kernel = np.asarray(head_params['kernel'], np.float32)
    bias = np.asarray(head_params['bias'], np.float32)
    num_labels = int(head['num_labels'])
    if kernel.shape != (cfg.hidden_size, num_labels) or bias.shape != (num_labels,):
      raise UserError(f'the classifier head has shape {kernel.shape} / {bias.shape}, which does '
                      f'not fit {num_labels} labels on width {cfg.hidden_size}')
    if cfg.pre_layer_norm:
      # RoBERTa's classification head is dense + tanh on the first token, then out_proj:
      # sharedbert's pooler, then its classifier. Its encoder has no pooler of its own.
      for part in ('weight', 'bias'):
        tensors[f'classifier.dense.{part}'] = tensors.pop(
            f'{hf_layout.PREFIX[hf_layout.PRE_LN]}.pooler.dense.{part}')
      tensors['classifier.out_proj.weight'] = np.ascontiguousarray(kernel.T)
      tensors['classifier.out_proj.bias'] = bias
    else:
      tensors['classifier.weight'] = np.ascontiguousarray(kernel.T)
      tensors['classifier.bias'] = bias
    names = list(head.get('labels') or [])
    if head.get('is_regression') or len(names) != num_labels:
      names = [f'LABEL_{i}' for i in range(num_labels)]
    hf_config.update(
        architectures=['RobertaPreLayerNormForSequenceClassification' if cfg.pre_layer_norm
                       else 'BertForSequenceClassification'], num_labels=num_labels,
        id2label={str(i): n for i, n in enumerate(names)},
        label2id={n: i for i, n in enumerate(names)},
        problem_type='regression' if head.get('is_regression') else 'single_label_classification',
        classifier_dropout=None, finetuning_task=head.get('task'))
  os.makedirs(hf_dir, exist_ok=True)
  with open(os.path.join(hf_dir, 'config.json'), 'w', encoding='utf-8') as f:
    json.dump(hf_config, f, indent=2, sort_keys=True)
    f.write('\n')
  # transformers refuses safetensors files without the 'format' metadata.
  save_file(tensors, os.path.join(hf_dir, 'model.safetensors'), metadata={'format': 'pt'})


def read_params(workdir: str, step: int | None = None) -> tuple[ModelConfig, Params, dict, int]:
  """A workdir's checkpoint's parameters, on one device.

  Only the parameters are read (not the optimizer state), whatever mesh the checkpoint was
  saved from, in the layout the checkpoint's meta names (a run that switched
  model.scan_layers on resume has checkpoints of both layouts).

  Args:
    workdir: a pretraining, imported or converted workdir.
    step: the checkpoint's step; None: the latest.
  Returns:
    (ModelConfig, params as numpy arrays (the pretraining tree), checkpoint meta, step).
  """
  directory = checkpoint_lib.checkpoint_dir(workdir)
  if not os.path.isdir(directory):
    raise UserError(f'{workdir} has no checkpoints/ directory; is it a sharedbert workdir?')
  run = runs.open_run(workdir, step, vocab='skip')
  if run.step is None:
    raise UserError(f'no checkpoint in {directory}')
  meta = run.checkpoint_meta()
  model_cfg = ModelConfig.from_config(meta['model'])
  device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device),
                        _abstract_params(model_cfg))
  return model_cfg, jax.tree.map(np.asarray, run.read(target)), meta, run.step


def read_encoder(workdir: str, step: int | None = None):
  """A workdir's encoder, on one device.

  Args:
    workdir: a pretraining, imported or converted workdir.
    step: the checkpoint's step; None: the latest.
  Returns:
    (ModelConfig, the encoder's params as numpy (BertModel's tree, no MLM head),
    tokenizer).
  """
  model_cfg, params, _, _ = read_params(workdir, step)
  tokenizer = tokenizer_lib.load_workdir(workdir)
  if tokenizer is None:
    raise UserError(f'{workdir} holds no vocabulary')
  return model_cfg, params['bert'], tokenizer


def write_checkpoint(workdir: str, config, params: Params, *, source: str,
                     vocab_size: int | None = None):
  """WORKDIR/config.json and a step-0 checkpoint (train.py's layout) holding `params`.

  The optimizer state is fresh, so `sharedbert.main` with this workdir resumes at step 0
  from these parameters.

  Args:
    workdir: the workdir to write.
    config: the run's config (a ConfigDict; its model section describes `params`).
    params: the pretraining tree (encoder and MLM head).
    source: where the parameters came from, kept in the checkpoint's meta.
    vocab_size: the tokenizer's size, when it is smaller than the embedding.
  Returns:
    None.
  """
  model_cfg = ModelConfig.from_config(config.model)
  expected = jax.tree.map(lambda x: (x.shape, np.dtype(x.dtype)), _abstract_params(model_cfg))
  got = jax.tree.map(lambda x: (x.shape, np.dtype(x.dtype)), params)
  if expected != got:
    raise ValueError('the parameters do not match the model config\'s parameter tree')
  ckpt = checkpoint_lib.Checkpointer(workdir, None)
  try:
    if ckpt.latest_step() is not None:
      raise UserError(f'{workdir} already holds a checkpoint; choose a new --workdir')
    params = jax.tree.map(jnp.asarray, params)
    tx, _ = optim_lib.make_optimizer(config.optim, config.total_steps)
    zero = jnp.zeros((), jnp.int32)
    state = pretrain_step.TrainState(step=zero, params=params, opt_state=tx.init(params),
                             skipped=zero, skipped_total=zero)
    meta = {'model': model_cfg.to_dict(), 'vocab_size': vocab_size or model_cfg.vocab_size,
            'seed': config.seed, 'batch_size': config.data.batch_size, 'data_position': 0,
            'source': source}
    ckpt.save(0, state, meta, force=True)
    ckpt.wait()
  finally:
    ckpt.close()
  workdir_lib.write_config(config, workdir)


def _abstract_params(model_cfg: ModelConfig):
  model = BertForPretraining(model_cfg)
  ids = jnp.zeros((1, 1), jnp.int32)
  return nn.unbox(jax.eval_shape(
      lambda: model.init(jax.random.key(0), ids, ids, jnp.ones_like(ids), ids)))['params']


def read_workdir_config(workdir: str) -> ml_collections.ConfigDict:
  """A workdir's config.json as a ConfigDict; a UserError when missing or not a config.

  Args:
    workdir: a run's workdir.
  Returns:
    The ConfigDict.
  """
  path = os.path.join(workdir, 'config.json')
  if not os.path.isfile(path):
    raise UserError(f'{path} does not exist; is {workdir} a sharedbert workdir?')
  config = _read_json(path)
  if not isinstance(config, dict):
    raise UserError(f'{path} is not a sharedbert config (a JSON object)')
  return ml_collections.ConfigDict(config)


# ---------------------------------------------------------------------------------------
# The two directions.

def _default_recipe():
  return sb_config.pretrain_config('standard')


def check_hf_dir(hf_dir: str) -> ModelConfig:
  """What import_hf checks of a Hugging Face directory before it writes (the config is a BERT
  layout, the tokenizer a WordPiece vocabulary of its size), without the tensors; for
  commands that import later but must refuse before they create anything.

  Args:
    hf_dir: the folder.
  Returns:
    Its ModelConfig.
  """
  if not os.path.isdir(hf_dir):
    raise UserError(f'{hf_dir} is not a folder; pass a Hugging Face model directory')
  config_path = os.path.join(hf_dir, 'config.json')
  if not os.path.isfile(config_path):
    raise UserError(f'{config_path} does not exist; --hf_dir must be a directory that '
                    'save_pretrained wrote')
  model_cfg = model_config_from_hf(_read_json(config_path), config_path)
  hf_tokenizer.read_hf_tokenizer(hf_dir, model_cfg)
  return model_cfg


def import_hf(hf_dir: str, workdir: str, config=None) -> list[str]:
  """Hugging Face directory -> sharedbert workdir.

  Everything is checked before anything is written; the workdir is written beside its
  final place and renamed into it, so a failure leaves no half workdir.

  Args:
    hf_dir: a BERT, pre-LN RoBERTa, RoFormer or sharedbert custom-code folder.
    workdir: the new workdir (absent or empty).
    config: the recipe it resumes with (default: the base pretraining recipe); the
      architecture always comes from the checkpoint.
  Returns:
    Notes for the user (what was kept, dropped or initialised).
  """
  hf_config, tensors = read_hf_dir(hf_dir)
  where = os.path.join(hf_dir, 'config.json')
  custom = isinstance(hf_config, dict) and hf_config.get('model_type') == hf_custom.MODEL_TYPE
  if custom:
    model_cfg = hf_custom.model_config_from_json(hf_config, where)
    tokenizer = tokenizer_lib.load_workdir(hf_dir)
    if tokenizer is None:
      raise UserError(f'{hf_dir} has no vocab.model or vocab.txt; export it again with '
                      'sharedbert convert_hf export')
  else:
    model_cfg = model_config_from_hf(hf_config, where)
    tokenizer = hf_tokenizer.read_hf_tokenizer(hf_dir, model_cfg)
  atomic_dirs.fresh_dir(workdir, '--workdir')
  config = ml_collections.ConfigDict((config or _default_recipe()).to_dict())
  # The architecture comes from the checkpoint; dtype, remat and the like stay the recipe's.
  hf_model = model_cfg.to_dict()
  for key in (CUSTOM_KEYS if custom else ARCHITECTURE_KEYS):
    config.model[key] = hf_model[key]
  if custom:  # The variant's own settings (shared's diagonals' start, masa's atoms, ...).
    for key, value in model_cfg.variant_settings:
      config.model[key] = value
  config.hf_checkpoint = os.path.abspath(hf_dir)
  if custom and isinstance(hf_config.get('sharedbert_trained'), dict):
    # How the exported weights were trained: a later export's card says so, not the
    # import's default recipe at step 0.
    config.imported_training = hf_config['sharedbert_trained']
  # The recipe the workdir resumes with, before any write (its seq_len may still need
  # lowering to a small checkpoint's max_position_embeddings: main says so).
  validation.check_table(config, validation.PRETRAIN)
  validation.workdir(workdir)
  if custom:
    params, notes = _custom_params(tensors, model_cfg, config.seed, where)
  else:
    params, notes = params_from_hf(tensors, model_cfg, seed=config.seed)
  tmp = atomic_dirs.temp_dir_beside(workdir)
  try:
    write_checkpoint(tmp, config, params, source=f'huggingface:{os.path.abspath(hf_dir)}',
                     vocab_size=tokenizer.vocab_size)
    tokenizer.save(tmp)
    atomic_dirs.publish(tmp, workdir)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  if tokenizer.kind == 'wordpiece':
    notes.append(f'vocabulary: vocab.txt ({tokenizer.vocab_size} WordPiece tokens, '
                 f'{"lower-cased" if tokenizer.lowercase else "cased"}) and '
                 'tokenizer_config.json, kept as the workdir\'s vocabulary')
  else:
    notes.append(f'vocabulary: vocab.model ({tokenizer.vocab_size} sentencepiece pieces), kept '
                 'as the workdir\'s vocabulary')
  if tokenizer.vocab_size < model_cfg.vocab_size:
    notes.append(f'the embedding has {model_cfg.vocab_size - tokenizer.vocab_size} rows beyond '
                 'the vocabulary; they are kept and never produced by the tokenizer')
  return notes


# The model settings a custom-code folder decides (all of the architecture).
# (with the variant's own settings).
CUSTOM_KEYS = ARCHITECTURE_KEYS + ('causal', 'rope_theta', 'rope_query_phase')


def _custom_params(tensors, model_cfg: ModelConfig, seed: int, where: str):
  """A custom-code folder's tensors as a pretraining tree; a classifier's head is left out
  and the MLM head, which it lacks, initialised (said in a note)."""
  notes = []
  fresh = hf_layout.init_params(model_cfg, seed)
  tensors = dict(tensors)
  if any(k.startswith('classifier.') for k in tensors):
    tensors = {k: v for k, v in tensors.items() if not k.startswith('classifier.')}
    fresh_head = hf_custom.tensors_from_params({'mlm_head': fresh['mlm_head']})
    tensors.update(fresh_head)
    notes.append('a sequence classifier: its encoder is imported, its classifier left out, '
                 'and the MLM head initialised at random')
  hf_custom.check_tensors(tensors, fresh, where)
  params = hf_custom.params_from_tensors(tensors)
  notes.insert(0, f'{model_cfg.attention} attention, {len(tensors)} tensors, taken as they '
               'are (sharedbert\'s own names)')
  return params, notes


def export_hf(workdir: str, hf_dir: str, step: int | None = None, *,
              overwrite: bool = False, custom_code: bool = False) -> list[str]:
  """sharedbert workdir -> Hugging Face directory; returns notes for the user.

  A pretraining (or imported, or converted) workdir becomes a masked-LM model; a fine-tuned
  seed directory of sharedbert.tasks.finetune (WORKDIR/<task>/seed_<s>) a sequence
  classifier. A `standard` bidirectional model with position embeddings (and a classifier
  on the [CLS] pooler) is written as transformers' own BertForMaskedLM /
  RobertaPreLayerNormForMaskedLM (...ForSequenceClassification); every other model, or any
  with `custom_code`, as the custom code of sharedbert.convert.hf_custom
  (trust_remote_code=True).
  HF_DIR must be new or empty, unless `overwrite`: then it is replaced whole (no file of
  the old directory stays). Everything is checked and written in a temporary directory
  first, then renamed into place, so a refusal leaves HF_DIR as it was.

  Args:
    workdir: a pretraining workdir or a fine-tuned seed directory.
    hf_dir: the folder to write.
    step: the checkpoint's step; None: the latest.
    overwrite: replace a non-empty hf_dir.
    custom_code: write the custom code even where transformers' own class would do.
  Returns:
    Notes for the user.
  """
  head = head_params = None
  if classifiers.is_classifier_dir(workdir):
    head, all_params, step = classifiers.read_classifier(workdir, step)
    model_cfg = ModelConfig.from_config(head['model'])
    params = {'bert': all_params['bert']}
    head_params = all_params['classifier']
  else:
    model_cfg, params, _, step = read_params(workdir, step)
  model_cfg, params = attention_lib.VARIANTS[model_cfg.attention].export_as(model_cfg, params)
  if head is not None:
    head = {**head, 'model': model_cfg.to_dict()}
  custom = custom_code or hf_custom.needs_custom_code(model_cfg, head)
  if custom:
    hf_custom.config_json(model_cfg, head)  # Refuses a variant without PyTorch code.
  else:
    hf_config_from_model(model_cfg)
  params = unstack_layers(params)  # One module per layer, as transformers has them.
  tokenizer = tokenizer_lib.load_workdir(workdir)
  if tokenizer is None:
    raise UserError(f'{workdir} holds no vocabulary (vocab.model or vocab.txt); the export '
                    'needs the tokenizer the model was trained with')
  if tokenizer.vocab_size > model_cfg.vocab_size:
    raise UserError(f'the vocabulary of {workdir} has {tokenizer.vocab_size} tokens but the '
                    f'word embedding has {model_cfg.vocab_size} rows: they do not belong together')
  if os.path.exists(hf_dir) and not os.path.isdir(hf_dir):
    raise UserError(f'--hf_dir={hf_dir} exists and is not a directory')
  if not overwrite and os.path.isdir(hf_dir) and os.listdir(hf_dir):
    raise UserError(f'--hf_dir={hf_dir} exists and is not empty; choose a new directory, or '
                    'pass --overwrite to replace it whole')
  validation.workdir(hf_dir, '--hf_dir')
  tmp = atomic_dirs.temp_dir_beside(hf_dir)
  try:
    if custom:
      card = hf_custom.card_from_workdir(workdir, model_cfg, params, step, head, head_params)
      hf_custom.write_dir(tmp, model_cfg, params, head=head, head_params=head_params,
                          card=card, trained=None if head else hf_custom.training_record(
                              workdir, step))
    else:
      write_hf_dir(tmp, model_cfg, params, head=head, head_params=head_params)
    names = hf_tokenizer.write_hf_tokenizer(tmp, tokenizer, model_cfg.max_position_embeddings)
    atomic_dirs.replace_dir(tmp, hf_dir)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  kind = ('SequenceClassification' if head else 'MaskedLM')
  if custom:
    what = (f'SharedBertFor{kind}, custom code ({model_cfg.attention} attention): load it '
            'with trust_remote_code=True')
  else:
    family = {hf_layout.BERT: 'Bert', hf_layout.PRE_LN: 'RobertaPreLayerNorm',
              hf_layout.ROFORMER: 'RoFormer'}[hf_layout.model_type(model_cfg)]
    pooler = not head and family != 'RoFormer'  # RoFormer has no pooler.
    what = f'{family}For{kind} layout' + (', with the pooler' if pooler else '')
  if head:
    what += (f'; {head["task"]}, {head["num_labels"]} '
             f'{"output (regression)" if head["is_regression"] else "labels"}')
  notes = [f'wrote step {step} of {workdir} to {hf_dir} ({what})',
           f'tokenizer ({tokenizer.kind}, {tokenizer.vocab_size} tokens): {", ".join(names)}; '
           'AutoTokenizer.from_pretrained loads it and gives sharedbert\'s ids']
  if tokenizer.vocab_size < model_cfg.vocab_size:
    notes.append(f'the embedding has {model_cfg.vocab_size - tokenizer.vocab_size} rows beyond '
                 'the vocabulary (never produced by the tokenizer)')
  return notes


def main(argv):
  """`sharedbert convert_hf import|export`: argv[1] says which way; prints the notes.

  Args:
    argv: absl's: the program, then 'import' or 'export'.
  Returns:
    None.
  """
  logging.set_verbosity(logging.WARNING)  # Orbax's INFO chatter.
  with one_line_errors('sharedbert convert_hf', FLAGS.verbose):
    if len(argv) != 2 or argv[1] not in ('import', 'export'):
      raise UserError('say which direction: python -m sharedbert.convert.hf import|export '
                      '--hf_dir=... --workdir=...')
    if not FLAGS.hf_dir or not FLAGS.workdir:
      raise UserError('both --hf_dir and --workdir are required')
    if argv[1] == 'import':
      notes = import_hf(FLAGS.hf_dir, FLAGS.workdir, FLAGS.config)
      print(f'imported {FLAGS.hf_dir} into {FLAGS.workdir} (step 0)')
    else:
      notes = export_hf(FLAGS.workdir, FLAGS.hf_dir, FLAGS.step, overwrite=FLAGS.overwrite,
                        custom_code=FLAGS.custom_code)
    for note in notes:
      print(f'  {note}')


if __name__ == '__main__':
  _define_flags()
  from sharedbert import cli
  app.run(main, flags_parser=cli.flags_parser('sharedbert convert_hf', 'sharedbert.convert.hf'))
