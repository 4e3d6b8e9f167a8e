"""Open a pretraining run anywhere: `sharedbert.restore(workdir, step=None)`.

(`import sharedbert` is enough: the package's `restore` is this module's function, loaded on
first use. This module is `sharedbert.runs`.)

    run = sharedbert.restore('/tmp/sharedbert_demo')   # the latest step, on the local devices
    out = run.encode(['The cat sat on the mat.'])      # sequence_output [N,T,D], pooled_output [N,D]
    run.fill_mask('Return the [MASK] of the list.')    # the top 5 tokens and their probabilities

    clf = sharedbert.restore('/tmp/glue/sst2/seed_0')  # a fine-tuned GLUE classifier
    clf.predict(['a gripping film'])                   # [{'label', 'label_id', 'score'}]

It reads WORKDIR/config.json and the vocabulary (WORKDIR/vocab.model, or the vocab.txt of
a Hugging Face import), builds the model and restores its
parameters only (not the optimizer state) from WORKDIR/checkpoints/<step>, placed by the
run's logical axis rules on the caller's mesh: a checkpoint written on a pod's mesh opens on
a laptop's single CPU and the other way round. This is for one process (a notebook, a script,
an evaluation job); a multi-process training run resumes through `train.train_and_evaluate`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from sharedbert import checkpoint as checkpoint_lib
from sharedbert.utils import paths
from sharedbert import sharding
from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.errors import UserError
from sharedbert.models.bert import BertForPretraining, BertForSequenceClassification, ModelConfig
from sharedbert import config as sb_config
from sharedbert.tasks import classifiers

# Lengths (and the number of [MASK] slots) are rounded up to a multiple of this, so that
# a few shapes are compiled.
_BUCKET = 16


def checkpoint_steps(workdir: str) -> list[int]:
  """The completed checkpoint steps in WORKDIR/checkpoints, oldest first.

  Args:
    workdir: a run's workdir.
  Returns:
    The steps ([] when there is none).
  """
  directory = checkpoint_lib.checkpoint_dir(workdir)
  if not paths.gfile().isdir(directory):
    return []
  # Orbax writes a step under a temporary name and renames it when complete.
  return sorted(int(name.rstrip('/')) for name in paths.gfile().listdir(directory)
                if name.rstrip('/').isdigit())


def read_config(workdir: str) -> ml_collections.ConfigDict:
  """A workdir's config.json as a ConfigDict; a UserError when it is not a sharedbert
  workdir.

  Args:
    workdir: a run's workdir.
  Returns:
    The config the run wrote.
  Raises:
    UserError: no config.json, or not a sharedbert one.
  """
  path = os.path.join(workdir, 'config.json')
  if not paths.gfile().exists(path):
    raise UserError(f'{path} not found: {workdir} is not a sharedbert workdir (a pretraining '
                    'run writes config.json, vocab.model and checkpoints/ there)')
  with paths.gfile().GFile(path) as f:
    return ml_collections.ConfigDict(json.load(f))


def open_vocab(workdir: str, model_cfg: ModelConfig) -> tokenizer_lib.Tokenizer:
  """The workdir's vocabulary (vocab.model or vocab.txt), checked against the model.

  Args:
    workdir: a run's workdir.
    model_cfg: its model (the vocabulary must fit its embedding).
  Returns:
    The tokenizer.
  """
  tokenizer = tokenizer_lib.load_workdir(workdir)
  if tokenizer is None:
    raise UserError(f'{workdir} holds no vocabulary ({tokenizer_lib.VOCAB_FILE}, or '
                    f'{tokenizer_lib.WORDPIECE_FILE} from a Hugging Face import); copy the '
                    'one the model was trained with into it')
  if tokenizer.vocab_size > model_cfg.vocab_size:
    raise UserError(f'the vocabulary of {workdir} has {tokenizer.vocab_size} tokens but the '
                    f'model\'s embedding has {model_cfg.vocab_size} rows: they do not belong '
                    'together')
  return tokenizer


def _target_mesh(mesh, devices) -> jax.sharding.Mesh:
  if isinstance(mesh, jax.sharding.Mesh):
    return mesh
  devices = list(devices) if devices is not None else jax.local_devices()
  sizes = dict(mesh or {'data': -1})
  unknown = set(sizes) - set(sharding.MESH_AXES)
  if unknown:
    raise UserError(f'unknown mesh axes {sorted(unknown)}; use {", ".join(sharding.MESH_AXES)}')
  return sharding.make_mesh({a: sizes.get(a, 1) for a in sharding.MESH_AXES}, devices)


@dataclasses.dataclass(frozen=True)
class OpenRun:
  """A pretraining workdir, opened: what every reader of a run needs (restore, fine-tuning's
  init_from, the exporter, the studies). Arrays are read on demand (`read`), so opening is
  cheap and reads no checkpoint.

  Attributes:
    workdir: the run's --workdir.
    config: its config.json.
    model_config: the model of config.json.
    tokenizer: its vocabulary (vocab.model, or an import's vocab.txt); None if it has none
      or open_run was asked not to read it.
    steps: its completed checkpoint steps, oldest first.
    step: the step `read` reads: the one asked for, else the latest; None with no checkpoint.
  """
  workdir: str
  config: ml_collections.ConfigDict
  model_config: ModelConfig
  tokenizer: tokenizer_lib.Tokenizer | None
  steps: tuple[int, ...]
  step: int | None

  def checkpoint_meta(self) -> dict:
    """The JSON meta saved with `step` (the model it was saved with, the data position)."""
    ckpt = checkpoint_lib.Checkpointer(self.workdir, None, read_only=True)
    try:
      return ckpt.restore_meta(self._step())
    finally:
      ckpt.close()

  def saved_shapes(self, part: tuple[str, ...] = ('params',)) -> dict[str, tuple] | None:
    """{'a/b/c': shape} of `part` of the checkpoint at `step`, reading no array; None if
    the checkpoint has no such part."""
    saved = checkpoint_lib.saved_part(self.workdir, self._step(), part)
    return None if saved is None else checkpoint_lib.tree_shapes(saved)

  def read(self, target, part: tuple[str, ...] = ('params',)):
    """Reads `part` of the checkpoint at `step` (only it) onto target's shardings.

    Args:
      target: the part's abstract tree (jax.ShapeDtypeStruct leaves with shardings).
      part: keys from the train state's root: ('params',) for the whole model,
        ('params', 'bert') for the encoder alone.
    Returns:
      The part as jax arrays placed as `target` says.
    """
    return checkpoint_lib.read_part(self.workdir, self._step(), target, part)

  def _step(self) -> int:
    if self.step is None:
      raise UserError(f'no checkpoint in {checkpoint_lib.checkpoint_dir(self.workdir)}; a run '
                      'saves one every ckpt.every_steps and at its end')
    return self.step


def open_run(workdir: str, step: int | None = None, *, vocab: str = 'required') -> OpenRun:
  """Opens a pretraining workdir: its config, model config, vocabulary and checkpoint steps.

  Args:
    workdir: the run's --workdir (a local path or gs://...).
    step: the checkpoint to read; None for the latest (or none, if it has no checkpoint).
    vocab: 'required' (a workdir without a vocabulary is an error), 'optional' (then
      `tokenizer` is None) or 'skip' (not read: readers of the parameters alone).
  Returns:
    An `OpenRun`; nothing of the checkpoint is read until `read`.
  """
  workdir = os.fspath(workdir)
  config = read_config(workdir)
  if 'model' not in config:
    raise UserError(f'{os.path.join(workdir, "config.json")} has no model section; is it a '
                    'sharedbert pretraining run?')
  model_cfg = ModelConfig.from_config(config.model)
  if vocab not in ('required', 'optional', 'skip'):
    raise ValueError(f'vocab={vocab!r}: required, optional or skip')
  tokenizer = (open_vocab(workdir, model_cfg) if vocab == 'required'
               else tokenizer_lib.load_workdir(workdir) if vocab == 'optional' else None)
  steps = tuple(checkpoint_steps(workdir))
  if step is not None and step not in steps:
    raise UserError(f'no checkpoint at step {step} in {checkpoint_lib.checkpoint_dir(workdir)}; '
                    f'steps there: {list(steps)}')
  return OpenRun(workdir, config, model_cfg, tokenizer, steps,
                 step if step is not None else (steps[-1] if steps else None))


def restore(workdir: str, step: int | None = None, *,
            mesh: jax.sharding.Mesh | Mapping[str, int] | None = None,
            devices: Sequence[jax.Device] | None = None) -> 'Restored':
  """The model, parameters, tokenizer and config of a run, on the caller's devices.

  Args:
    workdir: the run's --workdir (a local path or gs://...).
    step: the checkpoint step; None for the latest.
    mesh: where the parameters go: a `jax.sharding.Mesh` with axes ('data', 'fsdp',
      'tensor'), or their sizes as a dict ({'fsdp': 8}; missing axes are 1, and -1 takes
      the remaining devices). Default: every device on 'data' (parameters replicated).
    devices: the devices of a mesh given by sizes (default: this process's devices), e.g.
      `jax.devices('cpu')[:1]` for one CPU.
  Returns:
    A `Restored` (model, params, tokenizer, config, step; `encode`, `fill_mask`), or a
    `RestoredClassifier` for a fine-tuned seed directory.
  """
  workdir = os.fspath(workdir)
  if classifiers.is_classifier_dir(workdir):
    return restore_classifier(workdir, step, mesh=mesh, devices=devices)
  run = open_run(workdir, step)
  run._step()  # pylint: disable=protected-access  # No checkpoint: say so before any work.
  config = run.config
  target_mesh = _target_mesh(mesh, devices)
  axis_rules = sharding.rules(config)
  model = BertForPretraining(run.model_config)
  abstract = _abstract_params(model, config, target_mesh, axis_rules)
  # The latest step, or the one before if it is damaged (as a resumed run does).
  candidates = [step] if step is not None else list(run.steps[::-1])
  for i, candidate in enumerate(candidates):
    at = dataclasses.replace(run, step=candidate)
    try:
      params = _read_params(at, abstract)
    except UserError:
      raise
    except Exception as e:  # A damaged step: a truncated or missing file.
      if i + 1 == len(candidates):
        raise
      logging.warning('checkpoint step %d in %s cannot be restored (%s: %s); trying step %d',
                      candidate, workdir, type(e).__name__, str(e).splitlines()[0][:200],
                      candidates[i + 1])
      continue
    return Restored(model=model, params=params, tokenizer=run.tokenizer, config=config,
                    mesh=target_mesh, step=candidate, axis_rules=axis_rules)


def _abstract_params(model, config, mesh, axis_rules):
  """The model's parameters as ShapeDtypeStructs with their shardings on `mesh`."""
  # Parameter shapes do not depend on the length; an imported checkpoint's recipe may keep a
  # data.seq_len longer than its position table, so the shorter of the two.
  length = min(config.data.seq_len, config.model.max_position_embeddings)
  z = jnp.zeros((1, length), jnp.int32)
  inputs = (z, z, jnp.ones_like(z), jnp.zeros((1, 2), jnp.int32))  # As pretrain_step.init_params.
  with nn.logical_axis_rules(axis_rules):
    boxed = jax.eval_shape(lambda r: model.init({'params': r}, *inputs)['params'],
                           jax.random.key(0))
    shardings = sharding.logical_shardings(boxed, mesh, axis_rules)
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      nn.unbox(boxed), shardings)


def _read_params(run: OpenRun, abstract):
  path = f'{checkpoint_lib.checkpoint_dir(run.workdir)}/{run.step}/state'
  _check_fits(run.saved_shapes() or {}, checkpoint_lib.tree_shapes(abstract), path,
              run.workdir)
  return run.read(abstract)


def _check_fits(have, want, path, workdir):
  """The checkpoint's parameters must be those of the model in config.json."""
  problems = ([f'{k} missing' for k in want if k not in have]
              + [f'{k} unexpected' for k in have if k not in want]
              + [f'{k} has shape {have[k]}, the model {want[k]}'
                 for k in want if k in have and have[k] != want[k]])
  if problems:
    raise UserError(f'the checkpoint {path} does not hold the parameters of the model in '
                    f'{workdir}/config.json: {"; ".join(problems[:3])}'
                    f'{f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""}')


@dataclasses.dataclass
class Restored:
  """A restored run: `model`, `params`, `tokenizer`, `config`, plus `encode` and `fill_mask`."""
  model: BertForPretraining
  params: Any
  tokenizer: tokenizer_lib.Tokenizer
  config: ml_collections.ConfigDict
  mesh: jax.sharding.Mesh
  step: int
  axis_rules: tuple = ()

  def __post_init__(self):
    def forward(params, ids, positions):
      out = self.model.apply({'params': params}, ids, jnp.zeros_like(ids),
                             (ids != self.tokenizer.pad_id).astype(jnp.int32), positions)
      return {'sequence_output': out['sequence_output'].astype(jnp.float32),
              'pooled_output': out['pooled_output'].astype(jnp.float32),
              'log_probs': jax.nn.log_softmax(out['mlm_logits'].astype(jnp.float32), axis=-1)}

    # One function for encode and fill_mask: one compilation per input shape.
    self._forward = jax.jit(forward)

  @property
  def max_length(self) -> int:
    """The longest input the model takes (its position table)."""
    return int(self.config.model.max_position_embeddings)

  def _run(self, ids, positions, batch_size: int) -> dict:
    """The model on `ids` in chunks of at most `batch_size` rows, split over the mesh."""
    rows = len(ids)
    dp = sharding.data_parallel_size(self.mesh)
    # Chunks of a power of two rows (a multiple of the data-parallel size): few shapes.
    chunk = min(max(batch_size, 1), 1 << (rows - 1).bit_length())
    chunk = -(-chunk // dp) * dp
    batch_sharding = sharding.batch_sharding(self.mesh)
    outputs = []
    for start in range(0, rows, chunk):
      part = [ids[start:start + chunk], positions[start:start + chunk]]
      n = len(part[0])
      ids_part, positions_part = (
          jax.device_put(np.pad(a, [(0, chunk - n), (0, 0)]), batch_sharding) for a in part)
      with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.axis_rules):
        out = self._forward(self.params, ids_part, positions_part)
      outputs.append(jax.tree.map(lambda x: np.asarray(jax.device_get(x))[:n], out))
    return {k: np.concatenate([o[k] for o in outputs]) for k in outputs[0]}

  def _tokenize(self, texts: Sequence[str], max_length: int | None) -> np.ndarray:
    max_length = min(max_length or self.max_length, self.max_length)
    rows = [self.tokenizer.encode_pair(t, None, max_length)[0] for t in texts]
    length = min(-(-max(len(r) for r in rows) // _BUCKET) * _BUCKET, max_length)
    ids = np.full((len(rows), length), self.tokenizer.pad_id, np.int32)
    for i, r in enumerate(rows):
      ids[i, :len(r)] = r
    return ids

  def encode(self, texts: str | Sequence[str], max_length: int | None = None,
             batch_size: int = 64) -> dict:
    """Encodes texts as [CLS] text [SEP] (truncated to max_length tokens).

    Returns numpy arrays: sequence_output [N, T, D] (T: the longest text, rounded up to a
    multiple of 16),
    pooled_output [N, D] (the pooler on [CLS]) and input_mask [N, T] (1 on real tokens).
    The texts go through the model `batch_size` at a time.
    """
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not texts:
      raise UserError('encode() needs at least one text')
    ids = self._tokenize(texts, max_length)
    out = self._run(ids, np.zeros((len(ids), _BUCKET), np.int32), batch_size)
    return {'sequence_output': out['sequence_output'], 'pooled_output': out['pooled_output'],
            'input_mask': (ids != self.tokenizer.pad_id).astype(np.int32)}

  def answerable(self, num_ids: int | None = None) -> np.ndarray:
    """[num_ids] bool: the ids fill_mask may answer. Only real tokens: not [PAD], [UNK],
    [CLS], [SEP], [MASK], nor ids beyond the vocabulary, nor a lone word boundary '▁' (not
    a word)."""
    tok = self.tokenizer
    usable = np.zeros(num_ids or int(self.config.model.vocab_size), bool)
    usable[:tok.vocab_size] = True
    usable[list(tok.special_ids)] = False
    if tok.kind == 'sentencepiece':
      space = tok.sp.piece_to_id('\u2581')
      if tok.id_to_piece(space) == '\u2581':
        usable[space] = False
    return usable

  def fill_mask(self, text: str, top_k: int = 5) -> list:
    """The most likely tokens for each [MASK] in `text`.

    Returns, for one [MASK], a list of `top_k` dicts {token, token_id, score, sequence}
    (score: the probability; sequence: the text with that token in place), best first; for
    several [MASK]s, one such list per [MASK].
    """
    ids = self._tokenize([text], None)
    tok = self.tokenizer
    positions = np.flatnonzero(ids[0] == tok.mask_id)
    if not len(positions):
      raise UserError(f'fill_mask: no [MASK] in {text!r} (within the first {self.max_length} '
                      'tokens)')
    width = -(-len(positions) // _BUCKET) * _BUCKET
    padded = np.zeros((1, width), np.int32)
    padded[0, :len(positions)] = positions
    log_probs = self._run(ids, padded, 1)['log_probs'][0]
    usable = self.answerable(log_probs.shape[-1])
    results = []
    candidates = np.flatnonzero(usable)
    for slot, position in enumerate(positions):
      scores = np.where(usable, log_probs[slot], -np.inf)
      best = candidates[np.argsort(-scores[candidates], kind='stable')[:top_k]]
      results.append([{
          'token': tok.token_text(i),
          'token_id': int(i),
          'score': float(np.exp(scores[i])),
          'sequence': tok.text_of(np.concatenate([ids[0][:position], [i],
                                                  ids[0][position + 1:]])),
      } for i in best])
    return results[0] if len(results) == 1 else results


def restore_classifier(seed_dir: str, step: int | None = None, *,
                       mesh: jax.sharding.Mesh | Mapping[str, int] | None = None,
                       devices: Sequence[jax.Device] | None = None) -> 'RestoredClassifier':
  """A fine-tuned GLUE classifier (WORKDIR/<task>/seed_<s> of a fine-tuning run).

  Args:
    seed_dir: the seed's directory.
    step: the epoch; default: the best kept one if the run selected the best epoch, else
      the last.
    mesh, devices: as `restore`.
  Returns:
    A `RestoredClassifier` (`logits`, `predict`).
  """
  with paths.gfile().GFile(os.path.join(seed_dir, classifiers.CLASSIFIER_FILE)) as f:
    head = json.load(f)
  model_cfg = ModelConfig.from_config(head['model'])
  tokenizer = open_vocab(seed_dir, model_cfg)
  target_mesh = _target_mesh(mesh, devices)
  axis_rules = tuple(_default_rules())
  model = BertForSequenceClassification(model_cfg, int(head['num_labels']),
                                        pooling=head.get('pooling', 'cls'))
  z = jnp.zeros((1, 8), jnp.int32)
  with nn.logical_axis_rules(axis_rules):
    boxed = jax.eval_shape(lambda r: model.init(r, z, z, jnp.ones_like(z))['params'],
                           jax.random.key(0))
    shardings = sharding.logical_shardings(boxed, target_mesh, axis_rules)
  head, params, epoch = classifiers.read_classifier(seed_dir, step, shardings=shardings)
  return RestoredClassifier(model=model, params=params, tokenizer=tokenizer, head=head,
                            mesh=target_mesh, step=epoch, axis_rules=axis_rules)


def _default_rules():
  return sb_config.DEFAULT_LOGICAL_AXIS_RULES


@dataclasses.dataclass
class RestoredClassifier:
  """A fine-tuned classifier: `predict(texts)`, plus `model`, `params`, `tokenizer`, `head`
  (the task, labels and model it was fine-tuned as) and `step` (the epoch)."""
  model: Any
  params: Any
  tokenizer: tokenizer_lib.Tokenizer
  head: dict
  mesh: jax.sharding.Mesh
  step: int
  axis_rules: tuple = ()

  def __post_init__(self):
    def forward(params, ids, segments):
      return self.model.apply({'params': params}, ids, segments,
                              (ids != self.tokenizer.pad_id).astype(jnp.int32))

    self._forward = jax.jit(forward)

  @property
  def labels(self) -> list[str]:
    """The label names, in the order of the logits."""
    return list(self.head['labels'])

  def logits(self, texts, max_length: int | None = None, batch_size: int = 64) -> np.ndarray:
    """Logits [N, num_labels] of texts: strings, or (a, b) pairs for the pair tasks."""
    texts = [texts] if isinstance(texts, (str, tuple)) else list(texts)
    if not texts:
      raise UserError('predict() needs at least one text')
    max_length = min(max_length or int(self.head['seq_len']),
                     int(self.head['model']['max_position_embeddings']))
    pairs = [(t, None) if isinstance(t, str) else tuple(t) for t in texts]
    if any(len(p) != 2 for p in pairs):
      raise UserError('predict(): each text is a string or an (a, b) pair')
    rows = [self.tokenizer.encode_pair(a, b, max_length) for a, b in pairs]
    length = min(-(-max(len(r[0]) for r in rows) // _BUCKET) * _BUCKET, max_length)
    ids = np.full((len(rows), length), self.tokenizer.pad_id, np.int32)
    segments = np.zeros_like(ids)
    for i, (r, s) in enumerate(rows):
      ids[i, :len(r)], segments[i, :len(s)] = r, s
    dp = sharding.data_parallel_size(self.mesh)
    chunk = min(max(batch_size, 1), 1 << (len(ids) - 1).bit_length())
    chunk = -(-chunk // dp) * dp
    batch_sharding = sharding.batch_sharding(self.mesh)
    out = []
    for start in range(0, len(ids), chunk):
      part = [ids[start:start + chunk], segments[start:start + chunk]]
      n = len(part[0])
      part = [jax.device_put(np.pad(a, [(0, chunk - n), (0, 0)]), batch_sharding) for a in part]
      with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.axis_rules):
        logits = self._forward(self.params, *part)
      out.append(np.asarray(jax.device_get(logits), np.float32)[:n])
    return np.concatenate(out)

  def predict(self, texts, max_length: int | None = None, batch_size: int = 64) -> list[dict]:
    """One dict per text: {'label', 'score'} (the most likely label and its probability)
    for a classifier; {'score'} (the predicted value) for a regressor (STS-B)."""
    logits = self.logits(texts, max_length, batch_size)
    if self.head['is_regression']:
      return [{'score': float(x[0])} for x in logits]
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return [{'label': self.labels[int(i)], 'label_id': int(i), 'score': float(p[i])}
            for p, i in zip(probs, probs.argmax(-1))]


