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
import orbax.checkpoint as ocp

from sharedbert import checkpoint as checkpoint_lib
from sharedbert.utils import paths
from sharedbert.errors import UserError
from sharedbert.models.bert import BertForSequenceClassification, ModelConfig
from sharedbert.tasks.pretrained import shapes


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
  """Whether `path` is a fine-tuned classifier's seed folder (it holds model.json)."""
  return paths.gfile().exists(os.path.join(path, CLASSIFIER_FILE))


def read_classifier(seed_dir: str, step: Optional[int] = None, shardings=None):
  """(description, params, epoch) of a fine-tuned classifier; params as numpy on one device,
  or placed by `shardings` (a tree like the params). Default epoch: the best kept one when
  the run selected the best epoch, else the last."""
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
        scores = {s: manager.restore(s, args=ocp.args.Composite(
            meta=ocp.args.JsonRestore()))['meta']['score'] for s in steps}
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
    have, want = shapes(saved), shapes(abstract)
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
