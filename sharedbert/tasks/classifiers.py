"""Fine-tuned GLUE classifiers on disk: WORKDIR/<task>/seed_<s>/model.json (what the
classifier is) and its orbax checkpoints, one per kept epoch. Written by the GLUE run
(sharedbert/tasks/glue_task.py), read by sharedbert.restore (sharedbert/runs.py) and
sharedbert.convert.hf."""

from __future__ import annotations

import json
import os
from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from sharedbert import checkpoint as checkpoint_lib
from sharedbert.utils import paths
from sharedbert.errors import UserError
from sharedbert.models.bert import BertForSequenceClassification, ModelConfig


CLASSIFIER_FILE = 'model.json'


def classifier_manager(seed_dir: str, config=None, *, read_only: bool = False):
  """The orbax manager of a seed's fine-tuned models (one checkpoint per kept epoch),
  keeping `config.ckpt.max_to_keep` of them (the best dev epochs when the run selects one).

  Args:
    seed_dir: the seed's folder.
    config: the fine-tuning config (None: read the kept ones).
    read_only: open without creating anything.
  Returns:
    An orbax CheckpointManager.
  """
  if config is None:
    return checkpoint_lib.epoch_manager(seed_dir, read_only=read_only)
  best = (lambda m: float(m['score'])) if config.eval.select_best_epoch else None
  return checkpoint_lib.epoch_manager(seed_dir, max_to_keep=int(config.ckpt.max_to_keep),
                                      best_fn=best, read_only=read_only)


def is_classifier_dir(path: str) -> bool:
  """Whether `path` is a fine-tuned classifier's seed folder (it holds model.json).

  Args:
    path: a folder.
  Returns:
    Whether it holds model.json.
  """
  return paths.gfile().exists(os.path.join(path, CLASSIFIER_FILE))


def read_classifier(seed_dir: str, step: Optional[int] = None, shardings=None):
  """(description, params, epoch) of a fine-tuned classifier; params as numpy on one device,
  or placed by `shardings` (a tree like the params). Default epoch: the best kept one when
  the run selected the best epoch, else the last.

  Args:
    seed_dir: the seed's folder.
    step: the epoch; None: the default above.
    shardings: where to place the params (None: numpy on one device).
  Returns:
    (model.json's description, params, epoch).
  """
  with paths.gfile().GFile(os.path.join(seed_dir, CLASSIFIER_FILE)) as f:
    head = json.load(f)
  manager = classifier_manager(seed_dir, read_only=True)
  try:
    steps = sorted(manager.all_steps())
    if not steps:
      raise UserError(f'no fine-tuned model in {seed_dir}/checkpoints (ckpt.max_to_keep=0, or '
                      'the seed did not finish an epoch)')
    if step is None:
      if head.get('selection') == 'best dev epoch':
        scores = {s: checkpoint_lib.read_epoch_meta(manager, s)['score'] for s in steps}
        step = max(steps, key=lambda s: (scores[s], -s))
      else:
        step = steps[-1]
    elif step not in steps:
      raise UserError(f'no fine-tuned model of epoch {step} in {seed_dir}/checkpoints; '
                      f'epochs kept: {steps}')
    model = BertForSequenceClassification(ModelConfig.from_config(head['model']),
                                          int(head['num_labels']),
                                          pooling=head.get('pooling', 'cls'))
    z = jnp.zeros((1, 8), jnp.int32)
    abstract = nn.unbox(jax.eval_shape(
        lambda: model.init(jax.random.key(0), z, z, jnp.ones_like(z))))['params']
    saved = manager.item_metadata(step)['params']
    saved = getattr(saved, 'tree', saved)
    have, want = checkpoint_lib.tree_shapes(saved), checkpoint_lib.tree_shapes(abstract)
    if have != want:
      raise UserError(f'the model in {seed_dir}/checkpoints/{step} does not fit the classifier '
                      f'that {CLASSIFIER_FILE} describes')
    as_numpy = shardings is None
    if as_numpy:
      device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
      shardings = jax.tree.map(lambda _: device, abstract)
    target = jax.tree.map(lambda a, sh: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh),
                          abstract, shardings)
    params = checkpoint_lib.read_epoch_params(manager, step, target)
  finally:
    manager.close()
  return head, jax.tree.map(np.asarray, params) if as_numpy else params, step
