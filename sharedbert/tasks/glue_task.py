"""GLUE as a task of the engine: the examples' features, the classifier's loss and
predictions, and `TaskRun`: one task's data, model and compiled steps, whose `run_seed`
fine-tunes (engine.fit_epoch), scores the dev sets after every epoch (engine.predict),
keeps the classifier and writes the seed's files (see sharedbert/tasks/finetune.py)."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import time
from typing import Optional

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tensorflow as tf

from sharedbert import checkpoint as checkpoint_lib
from sharedbert import interrupts
from sharedbert.evaluators import common as evaluators_lib
from sharedbert.tasks import classifiers
from sharedbert.tasks import glue_report
from sharedbert.utils import jsonio
from sharedbert import optim as optim_lib
from sharedbert import sharding
from sharedbert.utils import workdir as workdir_lib
from sharedbert.data import glue
from sharedbert.errors import UserError
from sharedbert.metrics import glue as glue_metrics
from sharedbert.metrics import stats
from sharedbert.models.bert import BertForSequenceClassification
from sharedbert.tasks import task as task_lib
from sharedbert.tasks.pretrained import PretrainedRun
from sharedbert.tasks import engine
from sharedbert.tasks import glue_seeds
from sharedbert.tasks import runner
from sharedbert.data import tokenizer as tokenizer_lib

FinetuneState = engine.State  # step, params, opt_state, dropout_rng


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
    """The same rows with only the first `length` columns."""
    return dataclasses.replace(self, input_ids=self.input_ids[:, :length],
                               segment_ids=self.segment_ids[:, :length])

  def arrays(self) -> dict:
    """The rows as the task engine takes them (sharedbert/tasks/engine.py)."""
    out = {'input_ids': self.input_ids, 'segment_ids': self.segment_ids}
    if self.labels is not None:
      out['labels'] = self.labels
    return out


def featurize(examples, tokenizer, seq_len: int, spec) -> Features:
  """Token ids of every example ([CLS] a [SEP] b [SEP], pairs truncated to seq_len), labels
  and ids.

  Args:
    examples: the split's Examples.
    tokenizer: the vocabulary.
    seq_len: tokens a row, at most.
    spec: the TaskSpec.
  Returns:
    Features.
  """
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


# ---------------------------------------------------------------------------------------
# Steps.

def _loss(logits, batch, is_regression: bool):
  if is_regression:
    per_example = jnp.square(logits[:, 0] - batch['labels'])
  else:
    per_example = optax.softmax_cross_entropy_with_integer_labels(logits, batch['labels'])
  w = batch['weights']
  return jnp.sum(per_example * w) / jnp.maximum(jnp.sum(w), 1.0)


def _predictions(spec, logits: np.ndarray) -> np.ndarray:
  return logits[:, 0] if spec.is_regression else np.argmax(logits, axis=-1)


# ---------------------------------------------------------------------------------------
# A GLUE task as a Task (tasks/task.py).

@task_lib.register('glue')
class GlueTask:
  """A GLUE task (data/glue.py's TaskSpec) as a Task: sentence pairs as [CLS] a [SEP] b
  [SEP], BERT's classifier head, cross-entropy (squared error for STS-B) and the task's
  metrics. TaskRun, GLUE's seeded flow, reads, featurizes, builds and scores through it;
  the task runner (tasks/runner.py) can train one seed of it too."""
  bucket = True

  def __init__(self, task: str, *, data, pooling: str = 'cls'):
    self.spec = glue.get_task(task)
    self.name = self.spec.name
    self.data, self.pooling = data, pooling

  def load(self, split: str) -> list:
    """A split's examples, from data.glue_dir or tfds."""
    d = self.data
    return glue.load_examples(self.spec, split, glue_dir=d.glue_dir or None,
                              tfds_data_dir=d.tfds_data_dir or None,
                              skip_malformed=d.skip_malformed)

  def examples(self) -> tuple[list, list]:
    """(train: a fixed subset of data.max_train_examples when set, the first dev split)."""
    train = engine.subset(self.load('train'), self.data.max_train_examples)
    return train, self.load(self.spec.dev_splits[0])

  def features(self, examples, tokenizer) -> Features:
    """The examples tokenized, each split padded to its longest row, not to seq_len: the
    same results (padding is masked out), several times faster on short sentences."""
    seq_len = self.data.seq_len
    feats = featurize(examples, tokenizer, seq_len, self.spec)
    return feats.crop(engine.padded_width(feats.lengths, seq_len))

  def featurize(self, examples, tokenizer, *, training: bool) -> task_lib.TaskData:
    """`features` as the runner takes them (labels, when the examples have them)."""
    feats = self.features(examples, tokenizer)
    return task_lib.TaskData(feats.arrays(), feats.lengths, extra=feats)

  def model(self, model_config):
    """The encoder and the classifier head (config.pooling)."""
    return BertForSequenceClassification(model_config, self.spec.num_labels,
                                         pooling=self.pooling)

  def loss(self, logits, batch):
    """Cross-entropy (squared error for regression), the mean over real rows."""
    return _loss(logits, batch, self.spec.is_regression)

  def predictions(self, logits, data=None, examples=None) -> np.ndarray:
    """Class ids (regression: the score) of logits [n, num_labels]."""
    return _predictions(self.spec, np.asarray(logits, np.float32))

  def metrics(self, predictions, examples) -> dict:
    """The task's metrics and `score` (fractions), against the examples' labels."""
    labels = np.asarray([ex.label for ex in examples],
                        np.float32 if self.spec.is_regression else np.int32)
    return self.scores(predictions, labels)

  def scores(self, predictions, labels) -> dict:
    """The task's metrics and its `score` against `labels`."""
    metrics = glue_metrics.task_metrics(self.spec, predictions, labels)
    return {**metrics, 'score': glue_metrics.task_score(self.spec, metrics)}


# ---------------------------------------------------------------------------------------
# One task.

class TaskRun:
  """One task's data, model and compiled steps; `run_seed` fine-tunes and evaluates."""

  def __init__(self, config, task: str, pretrained: PretrainedRun, mesh, axis_rules,
               encoder_params, pretrained_step: Optional[int], workdir: str):
    self.config = config
    self.encoder_params = encoder_params   # None: from scratch.
    self.pretrained_step = pretrained_step
    self.task = GlueTask(task, data=config.data, pooling=config.pooling)
    self.spec = self.task.spec
    self.mesh = mesh
    self.axis_rules = axis_rules
    self.workdir = workdir
    self.pretrained = pretrained
    self._read_splits()
    self._compile()
    # config.evaluators: name -> settings (sharedbert/evaluators/common.py).
    self.evaluators = {name: evaluators_lib.from_config(name, self, **dict(settings))
                       for name, settings in config.get('evaluators', {}).items()}

  def _read_splits(self):
    """Loads the task's splits (train a fixed subset when data.max_train_examples is set,
    test only with eval.predict_test), featurizes them, and logs what was read."""
    config, spec, pretrained = self.config, self.spec, self.pretrained
    d = config.data
    load = self.task.load
    t0 = time.time()
    train_examples = load('train')
    self.num_train_total = len(train_examples)
    train_examples = engine.subset(train_examples, d.max_train_examples)
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
    self.features = {k: self.task.features(v, tok) for k, v in splits.items()}
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

  def _compile(self):
    """The model, an optimizer for this task's steps and the compiled steps, shared by
    every seed."""
    config, mesh = self.config, self.mesh
    dp = sharding.data_parallel_size(mesh)
    if config.batch_size % dp:
      raise UserError(f'batch_size={config.batch_size} is not divisible by the data-parallel '
                      f'size {dp} (mesh.data * mesh.fsdp)')
    self.eval_batch = -(-config.eval.batch_size // dp) * dp
    self.process = sharding.process_batch_block(mesh)  # This process's block of rows.
    self.steps_per_epoch = -(-len(self.train) // config.batch_size)
    self.total_steps = self.steps_per_epoch * config.num_epochs
    # Warmup: optim.warmup_fraction of this task's steps.
    tx, _ = optim_lib.make_optimizer(config.optim, self.total_steps)
    self.model = model = self.task.model(self.pretrained.model_config)
    steps = engine.compile_steps(model, tx, self.task.loss, mesh, self.axis_rules)
    self.state_shardings = steps.state_shardings
    self.init_state, self.step_fn, self.predict_fn = (steps.init_state, steps.step_fn,
                                                      steps.predict_fn)
    self.timer = engine.StepTimer()  # Shared by the seeds: only the first step compiles.

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

  def featurize(self, examples) -> Features:
    """Examples tokenized as this task's inputs, padded to their longest row."""
    return self.task.features(examples, self.pretrained.tokenizer)

  def predict(self, params, features: Features) -> np.ndarray:
    """Logits [n, num_labels] (float32) for every row of `features` (engine.predict:
    batches in order of length, each cropped to a power of two)."""
    logits = engine.predict(self.predict_fn, params, features.arrays(), features.lengths,
                            batch_size=self.eval_batch, mesh=self.mesh, process=self.process)
    return np.asarray(logits, np.float32)

  def evaluate_dev(self, params, label: str | None = None) -> dict:
    """Per dev split: predictions and the task's metrics and score (fractions); with
    `label` ('sst2 seed 0 epoch 1'), logged as it starts."""
    out = {}
    for split in self.spec.dev_splits:
      feats = self.features[split]
      if label:
        logging.info('%s: scoring %s rows of %s', label, f'{len(feats.labels):,}', split)
      preds = self.task.predictions(self.predict(params, feats))
      metrics = self.task.scores(preds, feats.labels)
      score = metrics.pop('score')
      out[split] = {'predictions': preds, 'metrics': metrics, 'score': score}
    return out

  def train_epoch(self, state, seed: int, epoch: int):
    """One epoch of engine.fit_epoch; returns (state, mean train loss)."""
    c, timer = self.config, self.timer
    t_epoch = time.time()
    timer.start_epoch(self.steps_per_epoch)

    def on_step(done, losses):
      timer.after_step(losses[-1])
      if c.log_every_steps and done % c.log_every_steps == 0 and done < self.steps_per_epoch:
        recent = float(np.mean(jax.device_get(losses[-c.log_every_steps:])))
        logging.info('%s seed %d epoch %d: step %d/%d loss=%.4f (%.1f steps/s)',
                     self.spec.name, seed, epoch, done, self.steps_per_epoch, recent,
                     done / (time.time() - t_epoch))

    state, losses = engine.fit_epoch(self.step_fn, state, self.train.arrays(),
                                     batch_size=c.batch_size, seed=seed, epoch=epoch,
                                     mesh=self.mesh, process=self.process, on_step=on_step)
    train_loss = float(np.mean(jax.device_get(losses)))
    timer.end_epoch()
    return state, train_loss

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
    if c.pooling != 'cls':  # Absent for BERT's pooler, so that earlier results stay valid.
      fp['pooling'] = c.pooling
    if c.get('evaluators'):  # Absent when none run, likewise.
      fp['evaluators'] = c.evaluators.to_dict()
    return json.loads(json.dumps(fp))

  def seed_dir(self, seed: int) -> str:
    """Where a seed's files go: WORKDIR/<task>/seed_<seed>."""
    return os.path.join(self.workdir, self.spec.name, f'seed_{seed}')

  def run_seed(self, seed: int, *, seeds_left: int, is_chief: bool) -> dict:
    """Fine-tunes with `seed` (or reuses a finished identical run); returns its record."""
    c = self.config
    spec = self.spec
    seed_dir = self.seed_dir(seed)
    fingerprint = self.fingerprint(seed)
    reused = glue_seeds.load_seed_result(seed_dir, spec, fingerprint)
    if reused is not None:
      logging.info('%s seed %d: reusing the finished run in %s', spec.name, seed, seed_dir)
      return reused

    t_start = time.time()

    def evaluate(state, epoch):
      dev = self.evaluate_dev(state.params, f'{spec.name} seed {seed} epoch {epoch}')
      interrupts.check('finished seeds are kept; the interrupted one starts over')
      return dev

    # In this order: an epoch's model is written before it is chosen or logged.
    manager = self._open_models(seed_dir, seed, is_chief)
    hooks = [] if manager is None else [_EpochModels(self, manager, seed_dir, seed)]
    best = _BestEpoch(spec.dev_splits[0]) if c.eval.select_best_epoch else _LastEpoch()
    log = _EpochLog(self, seed, seeds_left)
    hooks += [best, log]
    runner.train_epochs(self.init_state(jax.random.key(seed), self.encoder_params),
                        c.num_epochs, lambda state, epoch: self.train_epoch(state, seed, epoch),
                        evaluate, hooks)
    chosen_epoch, dev, params = best.epoch, best.dev, best.params
    epochs = log.records
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
          seed=glue_report.bootstrap_seed(c, glue_metrics.score_key(spec, split)))
      record['dev'][split] = {'score_key': glue_metrics.score_key(spec, split),
                              'n': int(len(labels)), 'metrics': v['metrics'],
                              'score': v['score'], 'score_ci': [low, high],
                              'predictions_file': glue_seeds.dev_predictions_name(spec, split)}
    test_predictions = {s: self.task.predictions(self.predict(params, self.features[s]))
                        for s in self.test_splits}
    if self.evaluators:
      results = {name: ev.run(params) for name, ev in self.evaluators.items()}
      record['evaluators'] = {name: r for name, r in results.items() if r is not None}
    interrupts.check('finished seeds are kept; the interrupted one starts over')
    if is_chief:
      self._write_seed(seed_dir, record, dev, test_predictions)
    for split, v in dev.items():
      record['dev'][split]['predictions'] = v['predictions']
    return record

  def save_model(self, manager, seed_dir: str, seed: int, epoch: int, params, dev: dict,
                  score: float):
    """The epoch's model; a write the disk refuses is one WriteFailed (exit 4), with the
    partial checkpoint removed (the seed starts over when the command is run again)."""
    directory = os.path.join(seed_dir, checkpoint_lib.CHECKPOINT_DIR)
    then = 'then run the same command again (finished seeds are kept)'
    checkpoint_lib.check_free_space(directory, params,
                                    f'the {self.spec.name} seed {seed} model of epoch {epoch}',
                                    then)
    try:
      checkpoint_lib.save_epoch(manager, epoch, params,
                                {'epoch': epoch, 'score': score, 'dev': dev})
    except Exception as e:  # pylint: disable=broad-except
      for partial in tf.io.gfile.glob(os.path.join(directory, '*.orbax-checkpoint-tmp*')):
        tf.io.gfile.rmtree(partial)
      raise checkpoint_lib.WriteFailed(
          f'could not write the {self.spec.name} seed {seed} model of epoch {epoch} to '
          f'{directory}: {checkpoint_lib.write_failure_reason(e)}; free some space, {then}'
      ) from e

  def _write_seed(self, seed_dir: str, record: dict, dev: dict, test_predictions: dict):
    """The seed's dev predictions, submission files and, last, metrics.json."""
    spec = self.spec
    tf.io.gfile.makedirs(seed_dir)
    for split, v in dev.items():
      feats = self.features[split]
      path = os.path.join(seed_dir, glue_seeds.dev_predictions_name(spec, split))
      glue_seeds.write_predictions(path, feats.guids, v['predictions'], feats.labels)
    for split, preds in test_predictions.items():
      name = glue.submission_filename(spec, split)
      glue_seeds.write_submission(os.path.join(seed_dir, name), spec,
                                  dict(zip(self.features[split].guids.tolist(), preds.tolist())))
      record['test_files'].append(name)
    # Written last: its presence marks the seed as finished.
    jsonio.write_json(os.path.join(seed_dir, glue_seeds.SEED_METRICS), record, indent=2)

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
      tokenizer_lib.copy_vocab(self.pretrained.workdir, seed_dir)
      spec = self.spec
      jsonio.write_json(os.path.join(seed_dir, classifiers.CLASSIFIER_FILE), {
          'kind': 'sequence_classification', 'task': spec.name,
          'num_labels': spec.num_labels, 'is_regression': spec.is_regression,
          'labels': list(spec.label_names), 'text_fields': len(spec.tsv_text_columns),
          'pooling': c.pooling,
          'seq_len': c.data.seq_len, 'seed': seed, 'model': self.pretrained.model_config.to_dict(),
          'init_from': self.pretrained.workdir, 'pretrained_step': self.pretrained_step,
          'from_scratch': bool(c.from_scratch),
          'selection': 'best dev epoch' if c.eval.select_best_epoch else 'last epoch',
          'score_key': glue_metrics.score_key(spec, spec.dev_splits[0])}, indent=2)
    workdir_lib.sync(f'finetune_models_{self.spec.name}_{seed}')
    return classifiers.classifier_manager(seed_dir, c)

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


def _epoch_dev(dev: dict) -> dict:
  """An epoch's dev figures as a seed's record keeps them (no predictions)."""
  return {s: {'metrics': v['metrics'], 'score': v['score']} for s, v in dev.items()}


class _EpochLog(runner.Hook):
  """Each epoch's record (metrics.json's `epochs`) and its log line with the task's ETA."""

  def __init__(self, run: TaskRun, seed: int, seeds_left: int):
    self.run, self.seed, self.seeds_left = run, seed, seeds_left
    self.records = []

  def after_epoch(self, epoch: runner.Epoch) -> None:
    run, c, spec, dev = self.run, self.run.config, self.run.spec, epoch.evaluation
    self.records.append({'epoch': epoch.number, 'train_loss': epoch.train_loss,
                         'time_s': round(epoch.seconds, 2), 'dev': _epoch_dev(dev)})
    steps_left = ((c.num_epochs - epoch.number) + self.seeds_left * c.num_epochs
                  ) * run.steps_per_epoch
    scores = ' '.join(
        f'{glue_metrics.score_key(spec, s)}: ' + ' '.join(
            f'{k}={v:.4f}' for k, v in dev[s]['metrics'].items()) for s in spec.dev_splits)
    logging.info('%s seed %d epoch %d/%d: train_loss=%.4f dev %s (%s; task eta %s)',
                 spec.name, self.seed, epoch.number, c.num_epochs, epoch.train_loss, scores,
                 glue_report.duration(epoch.seconds),
                 glue_report.duration(steps_left * run.timer.step_time))


class _LastEpoch(runner.Hook):
  """The seed's result is its last epoch (no selection on dev)."""
  epoch = dev = params = None

  def after_epoch(self, epoch: runner.Epoch) -> None:
    self.epoch, self.dev, self.params = epoch.number, epoch.evaluation, epoch.state.params


class _BestEpoch(runner.Hook):
  """The seed's result is its epoch of best score on the first dev split (a copy of its
  weights kept, as training goes on in place)."""
  epoch = dev = params = None

  def __init__(self, split: str):
    self.split = split

  def after_epoch(self, epoch: runner.Epoch) -> None:
    dev = epoch.evaluation
    if self.dev is None or dev[self.split]['score'] > self.dev[self.split]['score']:
      self.epoch, self.dev = epoch.number, dev
      self.params = jax.tree.map(jnp.copy, epoch.state.params)


class _EpochModels(runner.Hook):
  """Each epoch's model in the seed's checkpoint manager (classifiers.classifier_manager)."""

  def __init__(self, run: TaskRun, manager, seed_dir: str, seed: int):
    self.run, self.manager, self.seed_dir, self.seed = run, manager, seed_dir, seed

  def after_epoch(self, epoch: runner.Epoch) -> None:
    dev = epoch.evaluation
    self.run.save_model(self.manager, self.seed_dir, self.seed, epoch.number,
                        epoch.state.params, _epoch_dev(dev),
                        float(dev[self.run.spec.dev_splits[0]]['score']))

  def close(self) -> None:
    self.manager.close()
