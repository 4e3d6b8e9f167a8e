"""GLUE fine-tuning and evaluation: `finetune_and_evaluate(config, workdir)`.

The flow, per task: read the examples (a glue_data folder or tfds `glue/<task>`, one
reader in sharedbert/data/glue.py) -> tokenize pairs once with the pretraining run's
vocabulary -> for each seed: a classifier (`BertForSequenceClassification`) whose encoder
is the pretrained `params['bert']` and whose head is fresh -> AdamW with linear warmup and
decay (the pretraining optimizer, sharedbert.train.make_optimizer) -> dev scores after
every epoch -> test predictions in the GLUE submission format -> bootstrap intervals ->
W/results.json and W/results.md, rewritten after every task.

WORKDIR layout:
  config.json                          the resolved fine-tuning config
  results.json, results.md             all tasks finished so far (see `summarize_task`)
  <task>/seed_<s>/metrics.json         per-epoch log, dev metrics, per-seed interval
  <task>/seed_<s>/dev_predictions.tsv  index, prediction, label (MNLI: dev_matched_..., ...)
  <task>/seed_<s>/<TASK>.tsv           test predictions for the GLUE server (MNLI-m.tsv, ...)
  <task>/seed_<s>/checkpoints/<epoch>/ the fine-tuned classifier (orbax: `params`, and `meta`
                                       with the task, labels, model and dev score), the last
                                       ckpt.max_to_keep epochs (select_best_epoch: the best)
  <task>/seed_<s>/model.json           what the classifier is (read by sharedbert.restore and
                                       sharedbert.convert_hf export)
  <task>/seed_<s>/vocab.model          the vocabulary (or vocab.txt + tokenizer_config.json)

A seed whose metrics.json exists and was made with the same settings is not run again,
so an interrupted `task=all` resumes where it stopped.

Intervals. Per seed: the 95% percentile bootstrap interval of that seed's dev score,
resampling dev examples. Per task (results.md): mean ± sample std over seeds, and the
95% percentile bootstrap interval of the seed mean: each resample draws dev examples with
replacement once and scores every seed on those same examples, then averages. It measures
how much the reported mean depends on which dev examples were drawn; the std measures the
seeds. The GLUE average's interval resamples every task's dev set independently.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import os
import tempfile
import time
import zlib
from typing import Any, Optional

from absl import logging
import flax.linen as nn
from flax import struct
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
import tensorflow as tf

from sharedbert import checkpoint as checkpoint_lib
from sharedbert import sharding
from sharedbert import validation
from sharedbert import train as train_lib
from sharedbert.data import glue
from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.errors import UserError
from sharedbert.metrics import glue as glue_metrics
from sharedbert.metrics import stats
from sharedbert.models.bert import BertForSequenceClassification, ModelConfig

RESULTS_JSON = 'results.json'
RESULTS_MD = 'results.md'
SEED_METRICS = 'metrics.json'


class FinetuneState(struct.PyTreeNode):
  step: jax.Array
  params: Any
  opt_state: Any
  dropout_rng: jax.Array


def validate(config):
  """The range of every key (sharedbert/validation.py); no file is read."""
  if not config.init_from:
    raise UserError('config.init_from is empty: set --config.init_from to the --workdir of a '
                    'pretraining run (it holds config.json, vocab.model and checkpoints/)')
  validation.glue(config)


# ---------------------------------------------------------------------------------------
# Tasks and the pretrained run.

def _tfds_has_task(spec, data_dir: str) -> bool:
  """Whether tfds `glue/<task>` can be opened (prepared, or mocked in tests)."""
  import tensorflow_datasets as tfds
  try:
    tfds.builder(spec.tfds_name, data_dir=data_dir or None).as_dataset(split=spec.dev_splits[0])
  except AssertionError:  # tfds' "not prepared".
    return False
  return True


def resolve_tasks(config) -> list[str]:
  """config.task ('cola', 'cola,mrpc' or 'all') as task names, in GLUE's order for 'all'."""
  d = config.data
  if d.glue_dir and not os.path.isdir(d.glue_dir):
    raise UserError(f'data.glue_dir={d.glue_dir} does not exist; point it at the folder '
                    'holding CoLA/, SST-2/, ... (the glue_data layout)')
  if config.task.strip().lower() == 'all':
    if d.glue_dir:
      found = glue.available_tasks(d.glue_dir)
      where = f'data.glue_dir={d.glue_dir}'
    else:
      found = [n for n, spec in glue.TASKS.items() if _tfds_has_task(spec, d.tfds_data_dir)]
      where = f'tfds data dir {d.tfds_data_dir or "(default)"}'
    if not found:
      raise UserError(f'task=all found no GLUE task in {where}; expected task folders '
                      f'({", ".join(s.glue_dir_name for s in glue.TASKS.values())}) or '
                      'prepared tfds glue/<task> datasets')
    return found
  names = []
  for name in config.task.split(','):
    if name.strip():
      task = glue.get_task(name.strip()).name
      if task not in glue.TASKS:
        raise UserError(f'{name!r} is test-only (no training set); choose a trainable task')
      if task not in names:
        names.append(task)
  if not names:
    raise UserError('config.task is empty; name a GLUE task (cola, sst2, ...) or all')
  return names


@dataclasses.dataclass(frozen=True)
class PretrainedRun:
  """What fine-tuning takes from a pretraining workdir."""
  workdir: str
  model_config: ModelConfig
  tokenizer: tokenizer_lib.Tokenizer


def open_pretrained(init_from: str) -> PretrainedRun:
  """Reads the model section of config.json and the vocabulary of a pretraining workdir
  (vocab.model, or the vocab.txt of a Hugging Face import)."""
  config_path = os.path.join(init_from, 'config.json')
  if not tf.io.gfile.exists(config_path):
    raise UserError(f'config.init_from={init_from} is not a pretraining workdir: {config_path} '
                    'not found; point it at the --workdir of a finished pretraining run')
  with tf.io.gfile.GFile(config_path) as f:
    try:
      pretrain_config = json.load(f)
    except json.JSONDecodeError as e:
      raise UserError(f'{config_path} is not valid JSON ({e})') from None
  if 'model' not in pretrain_config:
    raise UserError(f'{config_path} has no model section; is it a sharedbert pretraining run?')
  model_cfg = ModelConfig.from_config(pretrain_config['model'])
  tokenizer = tokenizer_lib.load_workdir(init_from)
  if tokenizer is None:
    raise UserError(f'config.init_from={init_from} holds no vocabulary '
                    f'({tokenizer_lib.VOCAB_FILE}, or {tokenizer_lib.WORDPIECE_FILE} from a '
                    'Hugging Face import); point it at the --workdir of a finished '
                    'pretraining run')
  if tokenizer.vocab_size > model_cfg.vocab_size:
    raise UserError(f'the vocabulary of {init_from} has {tokenizer.vocab_size} tokens but the '
                    f'model in {config_path} has vocab_size {model_cfg.vocab_size}')
  return PretrainedRun(init_from, model_cfg, tokenizer)


def _shapes(tree) -> dict[str, tuple]:
  return {'/'.join(str(getattr(k, 'key', k)) for k in path): tuple(leaf.shape)
          for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def restore_encoder_params(init_from: str, target, *,
                           metadata_only: bool = False) -> tuple[Any, int]:
  """Reads only `params['bert']` of the latest checkpoint in a pretraining workdir.

  `target` is the encoder's abstract tree (ShapeDtypeStructs with shardings); the arrays
  are placed as it says. The MLM head and the optimizer state are not read (orbax partial
  restore). Returns (params, step); with `metadata_only`, (None, step) after checking
  that the checkpoint holds an encoder of target's shapes, without reading an array.
  """
  directory = checkpoint_lib.checkpoint_dir(init_from)
  if not tf.io.gfile.exists(directory):
    raise UserError(f'no checkpoints in {directory}; pretrain first, or set '
                    'config.from_scratch=True for a baseline without pretrained weights')
  manager = ocp.CheckpointManager(
      directory, options=ocp.CheckpointManagerOptions(read_only=True),
      item_handlers={'state': ocp.PyTreeCheckpointHandler(), 'meta': ocp.JsonCheckpointHandler()})
  try:
    step = manager.latest_step()
    if step is None:
      raise UserError(f'no checkpoint found in {directory}; pretrain first')
    saved = manager.item_metadata(step)['state']
    saved = getattr(saved, 'tree', saved)
    saved_bert = saved.get('params', {}).get('bert') if isinstance(saved, dict) else None
    if saved_bert is None:
      raise UserError(f'checkpoint {step} in {directory} has no params/bert encoder')
    have, want = _shapes(saved_bert), _shapes(target)
    if have != want:
      diffs = [f'{k}: checkpoint {have.get(k)} vs model {want.get(k)}'
               for k in sorted(set(have) | set(want)) if have.get(k) != want.get(k)]
      raise UserError(f'the encoder in checkpoint {step} of {directory} does not match '
                      f'{init_from}/config.json: {"; ".join(diffs[:5])}')
    if metadata_only:
      return None, step
    item = {'params': {'bert': target}}
    restore_args = jax.tree.map(lambda t: ocp.ArrayRestoreArgs(sharding=t.sharding), item)
    restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.PyTreeRestore(
        item=item, restore_args=restore_args, partial_restore=True)))
  finally:
    manager.close()
  return restored['state']['params']['bert'], step


# ---------------------------------------------------------------------------------------
# Fine-tuned classifiers on disk.

CLASSIFIER_FILE = 'model.json'


def classifier_manager(seed_dir: str, config=None, *, read_only: bool = False):
  """The orbax manager of a seed's fine-tuned models (one checkpoint per kept epoch)."""
  kw = {}
  if config is not None:
    kw = dict(max_to_keep=int(config.ckpt.max_to_keep))
    if config.eval.select_best_epoch:
      kw.update(best_fn=lambda m: float(m['score']), best_mode='max')
  return ocp.CheckpointManager(
      os.path.join(seed_dir, checkpoint_lib.CHECKPOINT_DIR),
      options=ocp.CheckpointManagerOptions(create=not read_only, read_only=read_only,
                                           enable_async_checkpointing=False, **kw),
      item_handlers={'params': ocp.PyTreeCheckpointHandler(),
                     'meta': ocp.JsonCheckpointHandler()})


def is_classifier_dir(path: str) -> bool:
  return tf.io.gfile.exists(os.path.join(path, CLASSIFIER_FILE))


def read_classifier(seed_dir: str, step: Optional[int] = None, shardings=None):
  """(description, params, epoch) of a fine-tuned classifier; params as numpy on one device,
  or placed by `shardings` (a tree like the params). Default epoch: the best kept one when
  the run selected the best epoch, else the last."""
  with tf.io.gfile.GFile(os.path.join(seed_dir, CLASSIFIER_FILE)) as f:
    head = json.load(f)
  manager = classifier_manager(seed_dir, read_only=True)
  try:
    steps = sorted(manager.all_steps())
    if not steps:
      raise UserError(f'no fine-tuned model in {seed_dir}/checkpoints (ckpt.max_to_keep=0, or '
                      'the seed did not finish an epoch)')
    if step is None:
      if head.get('selection') == 'best dev epoch':
        scores = {s: manager.restore(s, args=ocp.args.Composite(
            meta=ocp.args.JsonRestore()))['meta']['score'] for s in steps}
        step = max(steps, key=lambda s: (scores[s], -s))
      else:
        step = steps[-1]
    elif step not in steps:
      raise UserError(f'no fine-tuned model of epoch {step} in {seed_dir}/checkpoints; '
                      f'epochs kept: {steps}')
    model = BertForSequenceClassification(ModelConfig.from_config(head['model']),
                                          int(head['num_labels']))
    z = jnp.zeros((1, 8), jnp.int32)
    abstract = nn.unbox(jax.eval_shape(
        lambda: model.init(jax.random.key(0), z, z, jnp.ones_like(z))))['params']
    saved = manager.item_metadata(step)['params']
    saved = getattr(saved, 'tree', saved)
    have, want = _shapes(saved), _shapes(abstract)
    if have != want:
      raise UserError(f'the model in {seed_dir}/checkpoints/{step} does not fit the classifier '
                      f'that {CLASSIFIER_FILE} describes')
    as_numpy = shardings is None
    if as_numpy:
      device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
      shardings = jax.tree.map(lambda _: device, abstract)
    target = jax.tree.map(lambda a, sh: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh),
                          abstract, shardings)
    params = manager.restore(step, args=ocp.args.Composite(params=ocp.args.PyTreeRestore(
        item=target, restore_args=jax.tree.map(
            lambda t: ocp.ArrayRestoreArgs(sharding=t.sharding), target))))['params']
  finally:
    manager.close()
  return head, jax.tree.map(np.asarray, params) if as_numpy else params, step


def abstract_encoder(model_cfg: ModelConfig, mesh, axis_rules):
  """The encoder's parameters as ShapeDtypeStructs with their shardings on `mesh`."""
  def init(rng):
    z = jnp.zeros((1, 8), jnp.int32)
    model = BertForSequenceClassification(model_cfg, 1)
    return model.init({'params': rng}, z, z, jnp.ones_like(z))['params']['bert']

  with nn.logical_axis_rules(axis_rules):
    boxed = jax.eval_shape(init, jax.random.key(0))
    shardings = sharding.logical_shardings(boxed, mesh, axis_rules)
  return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                      nn.unbox(boxed), shardings)


# ---------------------------------------------------------------------------------------
# Features.

@dataclasses.dataclass
class Features:
  """Token ids of one split, padded to a common length; labels None for test splits."""
  input_ids: np.ndarray     # [n, T] int32
  segment_ids: np.ndarray   # [n, T] int32
  lengths: np.ndarray       # [n]
  labels: Optional[np.ndarray]
  guids: np.ndarray

  def __len__(self):
    return len(self.guids)

  def crop(self, length: int) -> 'Features':
    return dataclasses.replace(self, input_ids=self.input_ids[:, :length],
                               segment_ids=self.segment_ids[:, :length])


def featurize(examples, tokenizer, seq_len: int, spec) -> Features:
  n = len(examples)
  ids = np.zeros((n, seq_len), np.int32)
  segments = np.zeros((n, seq_len), np.int32)
  lengths = np.zeros((n,), np.int32)
  for i, ex in enumerate(examples):
    a, s = tokenizer.encode_pair(ex.text_a, ex.text_b, seq_len)
    ids[i, :len(a)], segments[i, :len(s)], lengths[i] = a, s, len(a)
  labels = None
  if n and all(ex.label is not None for ex in examples):
    labels = np.asarray([ex.label for ex in examples],
                        np.float32 if spec.is_regression else np.int32)
  return Features(ids, segments, lengths, labels, np.asarray([ex.guid for ex in examples]))


def _subset(examples, max_examples: int):
  """A fixed random subset (the same for every seed and run), in the file's order."""
  if not max_examples or len(examples) <= max_examples:
    return examples
  keep = np.sort(np.random.default_rng(0).permutation(len(examples))[:max_examples])
  return [examples[i] for i in keep]


def _batch(features: Features, idx: np.ndarray, size: int, process: tuple[int, int],
           length: Optional[int] = None) -> dict:
  """This process's rows of the global batch `idx`, padded to `size` rows of weight 0.

  `length` crops the columns (all of them by default).
  """
  weights = np.zeros((size,), np.float32)
  weights[:len(idx)] = 1.0
  rows = np.zeros((size,), np.int64)
  rows[:len(idx)] = idx
  index, count = process
  local = slice(index * size // count, (index + 1) * size // count)
  rows, weights = rows[local], weights[local]
  ids = features.input_ids[rows, :length]
  batch = {'input_ids': ids, 'segment_ids': features.segment_ids[rows, :length],
           'input_mask': (ids != tokenizer_lib.PAD_ID).astype(np.int32), 'weights': weights}
  if features.labels is not None:
    batch['labels'] = features.labels[rows]
  return batch


# ---------------------------------------------------------------------------------------
# Steps.

def _loss(logits, batch, is_regression: bool):
  if is_regression:
    per_example = jnp.square(logits[:, 0] - batch['labels'])
  else:
    per_example = optax.softmax_cross_entropy_with_integer_labels(logits, batch['labels'])
  w = batch['weights']
  return jnp.sum(per_example * w) / jnp.maximum(jnp.sum(w), 1.0)


def train_step(state: FinetuneState, batch, *, model, tx, is_regression: bool):
  rng = jax.random.fold_in(state.dropout_rng, state.step)

  def loss_fn(params):
    logits = model.apply({'params': params}, batch['input_ids'], batch['segment_ids'],
                         batch['input_mask'], deterministic=False, rngs={'dropout': rng})
    return _loss(logits, batch, is_regression)

  loss, grads = jax.value_and_grad(loss_fn)(state.params)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  new_state = state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates),
                            opt_state=opt_state)
  return new_state, loss


def predict_step(params, batch, *, model):
  return model.apply({'params': params}, batch['input_ids'], batch['segment_ids'],
                     batch['input_mask'], deterministic=True)


def _predictions(spec, logits: np.ndarray) -> np.ndarray:
  return logits[:, 0] if spec.is_regression else np.argmax(logits, axis=-1)


def _duration(seconds: float) -> str:
  seconds = int(round(seconds))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f'{h}h{m:02d}m{s:02d}s' if h else f'{m}m{s:02d}s'


# ---------------------------------------------------------------------------------------
# One task.

class TaskRun:
  """One task's data, model and compiled steps; `run_seed` fine-tunes and evaluates."""

  def __init__(self, config, task: str, pretrained: PretrainedRun, mesh, axis_rules,
               encoder_params, pretrained_step: Optional[int], workdir: str):
    self.config = config
    self.encoder_params = encoder_params   # None: from scratch.
    self.pretrained_step = pretrained_step
    self.spec = spec = glue.get_task(task)
    self.mesh = mesh
    self.axis_rules = axis_rules
    self.workdir = workdir
    self.pretrained = pretrained
    d = config.data
    load = functools.partial(glue.load_examples, spec, glue_dir=d.glue_dir or None,
                             tfds_data_dir=d.tfds_data_dir or None,
                             skip_malformed=d.skip_malformed)
    t0 = time.time()
    train_examples = load('train')
    self.num_train_total = len(train_examples)
    train_examples = _subset(train_examples, d.max_train_examples)
    if not train_examples:
      raise UserError(f'{spec.name}: the training set is empty')
    splits = {'train': train_examples}
    for split in spec.dev_splits:
      splits[split] = load(split)
      if not splits[split] or any(ex.label is None for ex in splits[split]):
        raise UserError(f'{spec.name}: the {split} split is empty or unlabeled; the dev sets '
                        'must carry labels')
    self.test_splits = []
    if config.eval.predict_test:
      for split in spec.test_splits:
        if d.glue_dir and not os.path.isfile(os.path.join(
            d.glue_dir, spec.glue_dir_name, glue.split_filename(spec, split))):
          logging.warning('%s: no %s file in %s; no submission file for it', spec.name, split,
                          d.glue_dir)
          continue
        splits[split] = load(split)
        self.test_splits.append(split)
    tok = pretrained.tokenizer
    feats = {k: featurize(v, tok, d.seq_len, spec) for k, v in splits.items()}
    # Each split is padded to its longest sequence, not to seq_len: the same results
    # (padding is masked out), several times faster on short-sentence tasks.
    self.features = {k: f.crop(min(d.seq_len, -(-int(f.lengths.max(initial=1)) // 8) * 8))
                     for k, f in feats.items()}
    self.train = self.features['train']
    self.length = self.train.input_ids.shape[1]  # The one compiled training shape.
    truncated = int(np.sum(self.train.lengths >= d.seq_len))
    logging.info('%s: %d train examples%s, dev %s, test %s; train padded to %d (%d train '
                 'pairs reach the seq_len limit %d); read and tokenized in %.1fs', spec.name,
                 len(self.train),
                 f' (a fixed subset of {self.num_train_total})'
                 if len(self.train) < self.num_train_total else '',
                 {s: len(self.features[s]) for s in spec.dev_splits},
                 {s: len(self.features[s]) for s in self.test_splits}, self.length, truncated,
                 d.seq_len, time.time() - t0)

    # Model, optimizer and the compiled steps, shared by every seed.
    dp = sharding.data_parallel_size(mesh)
    if config.batch_size % dp:
      raise UserError(f'batch_size={config.batch_size} is not divisible by the data-parallel '
                      f'size {dp} (mesh.data * mesh.fsdp)')
    self.eval_batch = -(-config.eval.batch_size // dp) * dp
    self.process = sharding.process_batch_block(mesh)  # This process's block of rows.
    self.steps_per_epoch = -(-len(self.train) // config.batch_size)
    self.total_steps = self.steps_per_epoch * config.num_epochs
    optim = ml_collections.ConfigDict(config.optim.to_dict())
    optim.warmup_steps = int(round(config.optim.warmup_fraction * self.total_steps))
    tx, _ = train_lib.make_optimizer(optim, self.total_steps)
    self.model = model = BertForSequenceClassification(pretrained.model_config, spec.num_labels)

    def init_boxed(rng):
      z = jnp.zeros((1, 8), jnp.int32)
      params = model.init({'params': rng}, z, z, jnp.ones_like(z))['params']
      return FinetuneState(step=jnp.zeros((), jnp.int32), params=params,
                           opt_state=tx.init(params), dropout_rng=rng)

    with nn.logical_axis_rules(axis_rules):
      abstract = jax.eval_shape(init_boxed, jax.random.key(0))
      self.state_shardings = sharding.logical_shardings(abstract, mesh, axis_rules)

    def init_state(rng, encoder):
      init_rng, dropout_rng = jax.random.split(rng)
      state = nn.unbox(init_boxed(init_rng))
      params = state.params
      if encoder is not None:
        # Copies, so that donating a seed's state never frees the pretrained arrays.
        params = {**params, 'bert': jax.tree.map(jnp.copy, encoder)}
      return FinetuneState(step=state.step, params=params, opt_state=tx.init(params),
                           dropout_rng=dropout_rng)

    self.init_state = jax.jit(init_state, out_shardings=self.state_shardings)
    self.compiled, self.step_time = False, 0.0
    batch_spec = sharding.batch_sharding(mesh)
    self.step_fn = jax.jit(
        functools.partial(train_step, model=model, tx=tx, is_regression=spec.is_regression),
        in_shardings=(self.state_shardings, batch_spec),
        out_shardings=(self.state_shardings, sharding.replicated(mesh)), donate_argnums=(0,))
    self.predict_fn = jax.jit(functools.partial(predict_step, model=model),
                              in_shardings=(self.state_shardings.params, batch_spec),
                              out_shardings=sharding.replicated(mesh))

  def from_scratch(self, config, workdir: str) -> 'TaskRun':
    """This run's data, model and compiled steps, with the encoder initialized at random
    (a no-pretraining baseline of the same architecture): the same training examples,
    batches and programs, nothing compiled again but the initialization. `config` differs
    from this run's only in from_scratch=True; seeds go under `workdir`."""
    if not config.from_scratch:
      raise ValueError('TaskRun.from_scratch needs a config with from_scratch=True')
    other = copy.copy(self)
    other.config, other.workdir = config, workdir
    other.encoder_params, other.pretrained_step = None, None
    return other

  def predict(self, params, features: Features) -> np.ndarray:
    """Logits [n, num_labels] (float32) for every row of `features`.

    Rows go in order of length, each batch padded to the next power of two (at least 16,
    at most the padded width of `features`): a few compiled shapes, far less padding.
    """
    out = np.zeros((len(features), self.spec.num_labels), np.float32)
    order = np.argsort(features.lengths, kind='stable')
    for start in range(0, len(features), self.eval_batch):
      idx = order[start:start + self.eval_batch]
      longest = int(features.lengths[idx].max())
      length = min(features.input_ids.shape[1], max(16, 1 << (longest - 1).bit_length()))
      batch = _batch(features, idx, self.eval_batch, self.process, length)
      batch.pop('labels', None)
      logits = self.predict_fn(params, sharding.global_batch(batch, self.mesh))
      out[idx] = np.asarray(jax.device_get(logits))[:len(idx)]
    return out

  def evaluate_dev(self, params) -> dict:
    """Per dev split: predictions and the task's metrics and score (fractions)."""
    out = {}
    for split in self.spec.dev_splits:
      feats = self.features[split]
      preds = _predictions(self.spec, self.predict(params, feats))
      metrics = glue_metrics.task_metrics(self.spec, preds, feats.labels)
      out[split] = {'predictions': preds, 'metrics': metrics,
                    'score': glue_metrics.task_score(self.spec, metrics)}
    return out

  def fingerprint(self, seed: int) -> dict:
    """The settings that determine a seed's result; a finished seed with equal ones is reused."""
    c = self.config
    fp = {'task': self.spec.name, 'seed': seed,
          'init_from': os.path.abspath(self.pretrained.workdir) if '://' not in
          self.pretrained.workdir else self.pretrained.workdir,
          'pretrained_step': self.pretrained_step, 'from_scratch': bool(c.from_scratch),
          'model': self.pretrained.model_config.to_dict(),
          'optim': c.optim.to_dict(), 'num_epochs': c.num_epochs, 'batch_size': c.batch_size,
          'seq_len': c.data.seq_len, 'max_train_examples': c.data.max_train_examples,
          'num_train': len(self.train), 'select_best_epoch': bool(c.eval.select_best_epoch),
          'glue_dir': c.data.glue_dir, 'tfds_data_dir': c.data.tfds_data_dir}
    return json.loads(json.dumps(fp))

  def seed_dir(self, seed: int) -> str:
    return os.path.join(self.workdir, self.spec.name, f'seed_{seed}')

  def run_seed(self, seed: int, *, seeds_left: int, is_chief: bool) -> dict:
    """Fine-tunes with `seed` (or reuses a finished identical run); returns its record."""
    c = self.config
    spec = self.spec
    seed_dir = self.seed_dir(seed)
    fingerprint = self.fingerprint(seed)
    reused = load_seed_result(seed_dir, spec, fingerprint)
    if reused is not None:
      logging.info('%s seed %d: reusing the finished run in %s', spec.name, seed, seed_dir)
      return reused

    state = self.init_state(jax.random.key(seed), self.encoder_params)
    epochs, best = [], None
    manager = self._open_models(seed_dir, seed, is_chief)
    t_start = time.time()
    for epoch in range(1, c.num_epochs + 1):
      t_epoch = t_steady = time.time()
      steady_steps = self.steps_per_epoch
      order = np.random.default_rng([seed, epoch]).permutation(len(self.train))
      losses = []
      for i in range(self.steps_per_epoch):
        idx = order[i * c.batch_size:(i + 1) * c.batch_size]
        batch = sharding.global_batch(_batch(self.train, idx, c.batch_size, self.process),
                                      self.mesh)
        state, loss = self.step_fn(state, batch)
        losses.append(loss)
        done = i + 1
        if not self.compiled:
          # Time the steady state only: the first step compiles.
          jax.block_until_ready(loss)
          self.compiled, t_steady, steady_steps = True, time.time(), self.steps_per_epoch - 1
        if c.log_every_steps and done % c.log_every_steps == 0 and done < self.steps_per_epoch:
          recent = float(np.mean(jax.device_get(losses[-c.log_every_steps:])))
          logging.info('%s seed %d epoch %d: step %d/%d loss=%.4f (%.1f steps/s)', spec.name,
                       seed, epoch, done, self.steps_per_epoch, recent,
                       done / (time.time() - t_epoch))
      train_loss = float(np.mean(jax.device_get(losses)))
      if steady_steps:
        self.step_time = (time.time() - t_steady) / steady_steps
      dev = self.evaluate_dev(state.params)
      elapsed = time.time() - t_epoch
      record = {'epoch': epoch, 'train_loss': train_loss, 'time_s': round(elapsed, 2),
                'dev': {s: {'metrics': v['metrics'], 'score': v['score']} for s, v in dev.items()}}
      epochs.append(record)
      first = dev[spec.dev_splits[0]]
      if manager is not None:
        manager.save(epoch, args=ocp.args.Composite(
            params=ocp.args.PyTreeSave(state.params),
            meta=ocp.args.JsonSave({'epoch': epoch, 'score': float(first['score']),
                                    'dev': record['dev']})),
                     metrics={'score': float(first['score'])})
        # Before the next step donates (frees) these parameters.
        manager.wait_until_finished()
      if c.eval.select_best_epoch and (best is None or first['score'] > best[1][spec.dev_splits[0]]['score']):
        best = (epoch, dev, jax.tree.map(jnp.copy, state.params))
      steps_left = ((c.num_epochs - epoch) + seeds_left * c.num_epochs) * self.steps_per_epoch
      scores = ' '.join(
          f'{glue_metrics.score_key(spec, s)}: ' + ' '.join(
              f'{k}={v:.4f}' for k, v in dev[s]['metrics'].items()) for s in spec.dev_splits)
      logging.info('%s seed %d epoch %d/%d: train_loss=%.4f dev %s (%s; task eta %s)',
                   spec.name, seed, epoch, c.num_epochs, train_loss, scores,
                   _duration(elapsed), _duration(steps_left * self.step_time))

    if manager is not None:
      manager.close()
    if best is not None:
      chosen_epoch, dev, params = best
    else:
      chosen_epoch, dev, params = c.num_epochs, dev, state.params
    record = {
        'task': spec.name, 'seed': seed, 'fingerprint': fingerprint,
        'num_train': len(self.train), 'steps': self.total_steps,
        'chosen_epoch': chosen_epoch,
        'selection': 'best dev epoch' if c.eval.select_best_epoch else 'last epoch',
        'train_time_s': round(time.time() - t_start, 2), 'epochs': epochs, 'dev': {},
        'test_files': [],
    }
    for split, v in dev.items():
      labels = self.features[split].labels
      low, high = stats.bootstrap_ci(
          glue_metrics.task_score_fn(spec), v['predictions'], labels,
          num_resamples=c.eval.bootstrap_resamples, confidence=c.eval.confidence,
          seed=_bootstrap_seed(c, glue_metrics.score_key(spec, split)))
      record['dev'][split] = {'score_key': glue_metrics.score_key(spec, split),
                              'n': int(len(labels)), 'metrics': v['metrics'],
                              'score': v['score'], 'score_ci': [low, high],
                              'predictions_file': _dev_predictions_name(spec, split)}
    test_predictions = {s: _predictions(spec, self.predict(params, self.features[s]))
                        for s in self.test_splits}
    if is_chief:
      tf.io.gfile.makedirs(seed_dir)
      for split, v in dev.items():
        feats = self.features[split]
        _write_predictions(os.path.join(seed_dir, _dev_predictions_name(spec, split)),
                           feats.guids, v['predictions'], feats.labels)
      for split, preds in test_predictions.items():
        name = glue.submission_filename(spec, split)
        _write_submission(os.path.join(seed_dir, name), spec,
                          dict(zip(self.features[split].guids.tolist(), preds.tolist())))
        record['test_files'].append(name)
      # Written last: its presence marks the seed as finished.
      _write_json(os.path.join(seed_dir, SEED_METRICS), record)
    for split, v in dev.items():
      record['dev'][split]['predictions'] = v['predictions']
    return record

  def _open_models(self, seed_dir: str, seed: int, is_chief: bool):
    """The seed's model manager (None with ckpt.max_to_keep=0), over a fresh directory:
    what an interrupted run of this seed left is deleted (the seed starts over)."""
    c = self.config
    if c.ckpt.max_to_keep <= 0:
      return None
    directory = os.path.join(seed_dir, checkpoint_lib.CHECKPOINT_DIR)
    if is_chief:
      if tf.io.gfile.exists(directory):
        tf.io.gfile.rmtree(directory)
      tf.io.gfile.makedirs(seed_dir)
      from sharedbert.data import tokenizer as tokenizer_lib
      tokenizer_lib.copy_vocab(self.pretrained.workdir, seed_dir)
      spec = self.spec
      _write_json(os.path.join(seed_dir, CLASSIFIER_FILE), {
          'kind': 'sequence_classification', 'task': spec.name,
          'num_labels': spec.num_labels, 'is_regression': spec.is_regression,
          'labels': list(spec.label_names), 'text_fields': len(spec.tsv_text_columns),
          'seq_len': c.data.seq_len, 'seed': seed, 'model': self.pretrained.model_config.to_dict(),
          'init_from': self.pretrained.workdir, 'pretrained_step': self.pretrained_step,
          'from_scratch': bool(c.from_scratch),
          'selection': 'best dev epoch' if c.eval.select_best_epoch else 'last epoch',
          'score_key': glue_metrics.score_key(spec, spec.dev_splits[0])})
    train_lib._sync(f'finetune_models_{self.spec.name}_{seed}')
    return classifier_manager(seed_dir, c)

  def majority_prediction(self):
    """The most frequent train label (STS-B: the mean score)."""
    labels = self.train.labels
    if self.spec.is_regression:
      return float(np.mean(labels))
    return int(np.bincount(labels, minlength=self.spec.num_labels).argmax())

  def majority_baseline(self, split: str) -> float:
    """The dev score of always predicting the most frequent train label (STS-B: the mean)."""
    constant = self.majority_prediction()
    dev = self.features[split].labels
    preds = np.full(dev.shape, constant, dev.dtype)
    return glue_metrics.task_score(self.spec, glue_metrics.task_metrics(self.spec, preds, dev))


def _bootstrap_seed(config, score_key: str) -> int:
  """Independent resamples per task; the same ones for every seed of a task."""
  return (int(config.eval.bootstrap_seed) * 1_000_003 + zlib.crc32(score_key.encode())) % 2**32


def _dev_predictions_name(spec, split: str) -> str:
  return glue.split_filename(spec, split)[:-len('.tsv')] + '_predictions.tsv'


def _write_predictions(path, guids, predictions, labels):
  with tf.io.gfile.GFile(path, 'w') as f:
    f.write('index\tprediction\tlabel\n')
    for g, p, l in zip(guids.tolist(), predictions.tolist(), labels.tolist()):
      f.write(f'{g}\t{p!r}\t{l!r}\n')


def _write_submission(path, spec, predictions):
  """glue.write_submission, by way of a local file so that `path` may be remote (gs://)."""
  with tempfile.TemporaryDirectory() as tmp:
    local = os.path.join(tmp, os.path.basename(path))
    glue.write_submission(local, spec, predictions)
    tf.io.gfile.copy(local, path, overwrite=True)


def _read_predictions(path, is_regression: bool):
  with tf.io.gfile.GFile(path) as f:
    rows = [line.split('\t') for line in f.read().splitlines()[1:]]
  cast = float if is_regression else int
  return np.asarray([cast(r[1]) for r in rows])


def _write_json(path, obj):
  tmp = path + '.tmp'
  with tf.io.gfile.GFile(tmp, 'w') as f:
    f.write(json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + '\n')
  tf.io.gfile.rename(tmp, path, overwrite=True)


def _json_default(x):
  if isinstance(x, (np.integer,)):
    return int(x)
  if isinstance(x, (np.floating,)):
    return float(x)
  if isinstance(x, np.ndarray):
    return x.tolist()
  raise TypeError(f'not JSON serializable: {type(x)}')


def load_seed_result(seed_dir: str, spec, fingerprint: dict) -> Optional[dict]:
  """A finished seed's record with its dev predictions, if its settings match."""
  path = os.path.join(seed_dir, SEED_METRICS)
  if not tf.io.gfile.exists(path):
    return None
  try:
    with tf.io.gfile.GFile(path) as f:
      record = json.load(f)
    if record.get('fingerprint') != fingerprint:
      logging.warning('%s was made with other settings; running that seed again', path)
      return None
    for split, v in record['dev'].items():
      v['predictions'] = _read_predictions(os.path.join(seed_dir, v['predictions_file']),
                                           spec.is_regression)
  except (OSError, tf.errors.OpError, ValueError, KeyError, IndexError) as e:
    logging.warning('cannot reuse %s (%s); running that seed again', path, e)
    return None
  return record


# ---------------------------------------------------------------------------------------
# Summaries.

def summarize_task(run: TaskRun, records: list[dict], config) -> dict:
  """Per dev split: each metric and the task score as mean, std, interval and per-seed values.

  `ci` is the percentile bootstrap interval of the seed mean (module docstring);
  `bootstrap` keeps the resampled seed means of the score for the GLUE average.
  """
  spec = run.spec
  c = config.eval
  out = {}
  for split in spec.dev_splits:
    labels = run.features[split].labels
    preds = [r['dev'][split]['predictions'] for r in records]
    key = glue_metrics.score_key(spec, split)
    seed = _bootstrap_seed(config, key)
    entry = {'score_key': key, 'n': int(len(labels)), 'metrics': {}}

    def summary(values, fn):
      mean, std = stats.mean_std(values)
      dist = stats.bootstrap_seed_mean(fn, preds, labels, num_resamples=c.bootstrap_resamples,
                                       seed=seed)
      low, high = stats.percentile_interval(dist, c.confidence)
      return {'mean': mean, 'std': std, 'ci': [low, high], 'per_seed': list(values)}, dist

    for name in spec.metric_names:
      entry['metrics'][name], _ = summary(
          [r['dev'][split]['metrics'][name] for r in records], glue_metrics.metric_fn(name))
    entry['score'], dist = summary([r['dev'][split]['score'] for r in records],
                                   glue_metrics.task_score_fn(spec))
    entry['majority_baseline'] = run.majority_baseline(split)
    entry['bootstrap'] = dist
    out[split] = entry
  return out


def glue_average_summary(tasks: dict, config) -> Optional[dict]:
  """The GLUE average (sharedbert.metrics.glue.glue_average) over the finished tasks."""
  means, per_seed, dists = {}, {}, {}
  for task in tasks.values():
    for entry in task['dev'].values():
      means[entry['score_key']] = entry['score']['mean']
      per_seed[entry['score_key']] = entry['score']['per_seed']
      dists[entry['score_key']] = entry['bootstrap']
  mean, covered, missing = glue_metrics.glue_average(means)
  if not covered:
    return None
  num_seeds = min(len(per_seed[k]) for k in covered)
  seed_averages = [glue_metrics.glue_average({k: per_seed[k][i] for k in covered})[0]
                   for i in range(num_seeds)]
  _, std = stats.mean_std(seed_averages)
  dist = np.mean([dists[k] for k in covered], axis=0)
  low, high = stats.percentile_interval(dist, config.eval.confidence)
  return {'mean': mean, 'std': std, 'ci': [low, high], 'per_seed': seed_averages,
          'covered': covered, 'missing': missing,
          'convention': 'mean of the 9 GLUE task scores (WNLI excluded), over the covered ones'}


_TASK_TITLES = {'mnli_m': 'MNLI-m', 'mnli_mm': 'MNLI-mm'}
_METRIC_TITLES = {'mcc': 'MCC', 'accuracy': 'accuracy', 'f1': 'F1', 'pearson': 'Pearson',
                  'spearman': 'Spearman'}


def _title(score_key: str) -> str:
  return _TASK_TITLES.get(score_key) or glue.get_task(score_key).glue_dir_name


def _pct(x: float) -> str:
  return f'{100 * x:.1f}'


def render_markdown(results: dict) -> str:
  """results.md: the dev figures as a person reads them (×100)."""
  r = results
  m = r['model']
  conf = round(100 * r['eval']['confidence'])
  lines = ['# GLUE dev results', '']
  init = ('randomly initialized (from_scratch: no pretrained weights)' if r['from_scratch']
          else f'pretrained {r["pretrained_step"]} steps')
  lines.append(f'Encoder: `{m["attention"]}` attention, {m["num_layers"]} layers, width '
               f'{m["hidden_size"]}, {m["num_heads"]} heads, vocabulary {m["vocab_size"]}; '
               f'{init} (`{r["init_from"]}`).')
  rec = r['recipe']
  lines.append(
      f'Fine-tuning: {len(r["seeds"])} seeds ({", ".join(map(str, r["seeds"]))}); AdamW lr '
      f'{rec["lr"]:g}, {rec["num_epochs"]} epochs, batch {rec["batch_size"]}, warmup '
      f'{100 * rec["warmup_fraction"]:g}% then linear decay, weight decay {rec["weight_decay"]:g}, '
      f'sequence length {rec["seq_len"]}. Reported epoch: '
      + ('the one with the best dev score, **selected on the dev set reported here '
         '(optimistic)**.' if rec['select_best_epoch'] else 'the last (no selection on dev).'))
  lines.append(f'Data: {r["source"]}.')
  subsets = [f'{glue.get_task(t).glue_dir_name} {v["num_train"]:,} of {v["num_train_total"]:,}'
             for t, v in r['tasks'].items() if v['num_train'] < v['num_train_total']]
  if subsets:
    lines.append(f'Training subsets (data.max_train_examples, a fixed random subset): '
                 f'{"; ".join(subsets)}.')
  lines += ['', f'Dev-set figures ×100. mean ± std: over seeds (sample std). {conf}% CI: '
            f'percentile bootstrap ({r["eval"]["bootstrap_resamples"]} resamples of the dev '
            'examples) of the seed mean, every seed scored on the same resample. Majority: '
            'the score of always predicting the most frequent training label (STS-B: the '
            'mean score).', '',
            f'| task | n dev | metric | mean ± std | {conf}% CI | per seed | majority |',
            '|---|---|---|---|---|---|---|']
  for task, v in r['tasks'].items():
    spec = glue.get_task(task)
    for split, e in v['dev'].items():
      title = _title(e['score_key'])
      rows = [(_METRIC_TITLES[n], e['metrics'][n]) for n in spec.metric_names]
      if len(spec.metric_names) > 1:
        rows.append((f'score ({"+".join(_METRIC_TITLES[n] for n in spec.metric_names)})/2',
                     e['score']))
      for i, (name, s) in enumerate(rows):
        first = i == 0
        lines.append(
            f'| {title if first else ""} | {e["n"] if first else ""} | {name} | '
            f'{_pct(s["mean"])} ± {_pct(s["std"])} | [{_pct(s["ci"][0])}, {_pct(s["ci"][1])}] | '
            f'{", ".join(_pct(x) for x in s["per_seed"])} | '
            f'{_pct(e["majority_baseline"]) if i == len(rows) - 1 else ""} |')
  avg = r.get('glue_average')
  lines.append('')
  if avg:
    covered = ', '.join(_title(k) for k in avg['covered'])
    missing = ', '.join(_title(k) for k in avg['missing']) or 'none'
    lines.append(
        f'**GLUE average** over {len(avg["covered"])} of 9 task scores ({covered}; missing: '
        f'{missing}; WNLI is never averaged): **{_pct(avg["mean"])} ± {_pct(avg["std"])}** '
        f'(std over seeds of the per-seed average), {conf}% CI [{_pct(avg["ci"][0])}, '
        f'{_pct(avg["ci"][1])}] (every task\'s dev set resampled independently). Per seed: '
        f'{", ".join(_pct(x) for x in avg["per_seed"])}.')
  else:
    lines.append('No GLUE average: none of the averaged tasks (all but WNLI) was run.')
  times = ', '.join(f'{glue.get_task(t).glue_dir_name} {_duration(v["train_time_s"])}'
                    for t, v in r['tasks'].items())
  lines += ['', f'Fine-tuning time (all seeds, including compilation): {times}.', '']
  return '\n'.join(lines)


def _public(results: dict) -> dict:
  """results.json: everything but the bootstrap samples and the prediction arrays."""
  out = dict(results)
  out['tasks'] = {}
  for task, v in results['tasks'].items():
    v = dict(v)
    v['dev'] = {s: {k: x for k, x in e.items() if k != 'bootstrap'} for s, e in v['dev'].items()}
    v['per_seed'] = [{k: x for k, x in rec.items() if k not in ('fingerprint',)}
                     | {'dev': {s: {k: x for k, x in d.items() if k != 'predictions'}
                                for s, d in rec['dev'].items()}} for rec in v['per_seed']]
    out['tasks'][task] = v
  return out


def write_reports(workdir: str, results: dict):
  _write_json(os.path.join(workdir, RESULTS_JSON), _public(results))
  with tf.io.gfile.GFile(os.path.join(workdir, RESULTS_MD), 'w') as f:
    f.write(render_markdown(results))


# ---------------------------------------------------------------------------------------
# The entry point.

def check_task_data(config, task: str) -> None:
  """Fails on a task whose training or dev data is missing, empty or malformed.

  glue_data files are read whole (a few seconds for the largest) and dropped; a prepared
  tfds dataset is opened and one example read.
  """
  spec = glue.get_task(task)
  d = config.data
  for split in ('train',) + tuple(spec.dev_splits):
    if d.glue_dir:
      examples = glue.read_glue_dir(d.glue_dir, spec, split, skip_malformed=d.skip_malformed)
    else:
      examples = glue.read_tfds(spec, f'{split}[:1]', d.tfds_data_dir or None)
    if not examples:
      raise UserError(f'{spec.name}: the {split} split is empty')
    if split != 'train' and any(ex.label is None for ex in examples):
      raise UserError(f'{spec.name}: the {split} split is unlabeled; the dev sets must carry '
                      'labels')


def preflight(config, workdir: str):
  """Every check a user's mistake can fail, before anything is written or restored:
  the config's values, the mesh, the pretraining workdir (its config, vocabulary and the
  encoder's shapes in its latest checkpoint) and each task's data. Returns (mesh,
  axis_rules, pretrained run, task names)."""
  validate(config)
  validation.workdir(workdir)
  mesh = sharding.make_mesh(config.mesh)
  axis_rules = sharding.rules(config)
  dp = sharding.data_parallel_size(mesh)
  if config.batch_size % dp:
    raise UserError(f'batch_size={config.batch_size} is not divisible by the data-parallel '
                    f'size {dp} (mesh.data * mesh.fsdp); choose a multiple of it')
  tasks = resolve_tasks(config)
  pretrained = open_pretrained(config.init_from)
  model_cfg = pretrained.model_config
  if config.data.seq_len > model_cfg.max_position_embeddings:
    raise UserError(f'data.seq_len={config.data.seq_len} exceeds the pretrained model\'s '
                    f'max_position_embeddings={model_cfg.max_position_embeddings}; '
                    f'data.seq_len must be an integer from 3 to '
                    f'{model_cfg.max_position_embeddings}')
  pairs = [t for t in tasks if glue.get_task(t).is_pair]
  if pairs and model_cfg.type_vocab_size < 2:
    raise UserError(f'{", ".join(pairs)} pair two sentences (segment ids 0 and 1) but the '
                    f'pretrained model has type_vocab_size={model_cfg.type_vocab_size}')
  for task in tasks:
    check_task_data(config, task)
  if not config.from_scratch:
    target = abstract_encoder(model_cfg, mesh, axis_rules)
    restore_encoder_params(config.init_from, target, metadata_only=True)
  return mesh, axis_rules, pretrained, tasks


def finetune_and_evaluate(config, workdir: str) -> dict:
  """Fine-tunes and scores every task of `config.task`; returns the results.json content."""
  workdir = os.fspath(workdir)
  is_chief = jax.process_index() == 0
  mesh, axis_rules, pretrained, tasks = preflight(config, workdir)
  seeds = [config.seed + i for i in range(config.seeds)]
  if is_chief:
    tf.io.gfile.makedirs(workdir)
    train_lib.write_config(config, workdir)
  logging.info('Fine-tuning %s attention from %s on %s with seeds %s',
               pretrained.model_config.attention, config.init_from, ', '.join(tasks), seeds)

  source = (f'glue_data folder `{config.data.glue_dir}`' if config.data.glue_dir else
            f'tfds glue/<task> in `{config.data.tfds_data_dir or "(default data dir)"}`')
  results = {
      'init_from': config.init_from, 'pretrained_step': None,
      'from_scratch': bool(config.from_scratch), 'model': pretrained.model_config.to_dict(),
      'seeds': seeds, 'source': source,
      'recipe': {'lr': config.optim.lr, 'num_epochs': config.num_epochs,
                 'batch_size': config.batch_size, 'warmup_fraction': config.optim.warmup_fraction,
                 'weight_decay': config.optim.weight_decay, 'seq_len': config.data.seq_len,
                 'max_train_examples': config.data.max_train_examples,
                 'select_best_epoch': bool(config.eval.select_best_epoch)},
      'eval': {'bootstrap_resamples': config.eval.bootstrap_resamples,
               'confidence': config.eval.confidence,
               'interval': 'percentile bootstrap over dev examples; per seed: that seed\'s '
                           'score; per task: the mean over seeds, all seeds scored on the '
                           'same resample'},
      'scale': 'fractions (results.md shows x100)',
      'tasks': {}, 'glue_average': None,
  }
  encoder_params = None
  if not config.from_scratch:
    # The same encoder for every task: read once, placed as the classifier places it.
    target = abstract_encoder(pretrained.model_config, mesh, axis_rules)
    encoder_params, step = restore_encoder_params(config.init_from, target)
    results['pretrained_step'] = step
    logging.info('Restored the pretrained encoder of step %d from %s', step, config.init_from)
  for task in tasks:
    t0 = time.time()
    run = TaskRun(config, task, pretrained, mesh, axis_rules, encoder_params,
                  results['pretrained_step'], workdir)
    records = []
    # Placement is decided above; the steps trace (and shard activations) under the mesh.
    with jax.set_mesh(mesh), nn.logical_axis_rules(axis_rules):
      for i, seed in enumerate(seeds):
        records.append(run.run_seed(seed, seeds_left=len(seeds) - i - 1, is_chief=is_chief))
    dev = summarize_task(run, records, config)
    results['tasks'][task] = {
        'num_train': len(run.train), 'num_train_total': run.num_train_total,
        'padded_length': run.length, 'steps_per_seed': run.total_steps,
        'train_time_s': round(time.time() - t0, 2), 'dev': dev, 'per_seed': records}
    results['glue_average'] = glue_average_summary(results['tasks'], config)
    for split, e in dev.items():
      s = e['score']
      logging.info('%s: score %.2f ± %.2f over %d seeds, %d%% CI [%.2f, %.2f] (majority %.2f)',
                   _title(e['score_key']), 100 * s['mean'], 100 * s['std'], len(seeds),
                   round(100 * config.eval.confidence), 100 * s['ci'][0], 100 * s['ci'][1],
                   100 * e['majority_baseline'])
    if is_chief:
      write_reports(workdir, results)
  if results['glue_average']:
    avg = results['glue_average']
    logging.info('GLUE average over %s: %.2f ± %.2f', ', '.join(avg['covered']),
                 100 * avg['mean'], 100 * avg['std'])
  logging.info('Wrote %s and %s', os.path.join(workdir, RESULTS_JSON),
               os.path.join(workdir, RESULTS_MD))
  return _public(results)

