"""What fine-tuning takes from a pretraining workdir: its model config and vocabulary
(`open_pretrained`) and its encoder's parameters (`restore_encoder_params`, read alone
from the latest checkpoint and placed on the caller's mesh)."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from sharedbert import checkpoint as checkpoint_lib
from sharedbert import runs
from sharedbert.utils import paths
from sharedbert import sharding
from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.errors import UserError
from sharedbert.models.bert import BertForSequenceClassification, ModelConfig


@dataclasses.dataclass(frozen=True)
class PretrainedRun:
  """What fine-tuning takes from a pretraining workdir."""
  workdir: str
  model_config: ModelConfig
  tokenizer: tokenizer_lib.Tokenizer


def open_pretrained(init_from: str) -> PretrainedRun:
  """Reads the model section of config.json and the vocabulary of a pretraining workdir
  (vocab.model, or the vocab.txt of a Hugging Face import), through runs.open_run.

  Args:
    init_from: the pretraining (or imported, or converted) workdir.
  Returns:
    A PretrainedRun: workdir, model_config and tokenizer (no parameters are read).
  """
  config_path = os.path.join(init_from, 'config.json')
  if not paths.gfile().exists(config_path):
    raise UserError(f'config.init_from={init_from} is not a pretraining workdir: {config_path} '
                    'not found; point it at the --workdir of a finished pretraining run')
  try:
    run = runs.open_run(init_from, vocab='optional')
  except json.JSONDecodeError as e:
    raise UserError(f'{config_path} is not valid JSON ({e})') from None
  model_cfg, tokenizer = run.model_config, run.tokenizer
  if tokenizer is None:
    raise UserError(f'config.init_from={init_from} holds no vocabulary '
                    f'({tokenizer_lib.VOCAB_FILE}, or {tokenizer_lib.WORDPIECE_FILE} from a '
                    'Hugging Face import); point it at the --workdir of a finished '
                    'pretraining run')
  if tokenizer.vocab_size > model_cfg.vocab_size:
    raise UserError(f'the vocabulary of {init_from} has {tokenizer.vocab_size} tokens but the '
                    f'model in {config_path} has vocab_size {model_cfg.vocab_size}')
  return PretrainedRun(init_from, model_cfg, tokenizer)


def restore_encoder_params(init_from: str, target, *,
                           metadata_only: bool = False) -> tuple[Any, int]:
  """Reads only `params['bert']` of the latest checkpoint in a pretraining workdir.

  Args:
    init_from: the pretraining run's --workdir.
    target: the encoder's abstract tree (ShapeDtypeStructs with shardings); the arrays are
      placed as it says. The MLM head and the optimizer state are not read.
    metadata_only: only check that the checkpoint holds an encoder of target's shapes.
  Returns:
    (params, step); with `metadata_only`, (None, step), reading no array.
  """
  directory = checkpoint_lib.checkpoint_dir(init_from)
  if not paths.gfile().exists(directory):
    raise UserError(f'no checkpoints in {directory}; pretrain first, or set '
                    'config.from_scratch=True for a baseline without pretrained weights')
  run = runs.open_run(init_from, vocab='skip')
  step = run.step
  if step is None:
    raise UserError(f'no checkpoint found in {directory}; pretrain first')
  have = run.saved_shapes(('params', 'bert'))
  if have is None:
    raise UserError(f'checkpoint {step} in {directory} has no params/bert encoder')
  want = checkpoint_lib.tree_shapes(target)
  if have != want:
    diffs = [f'{k}: checkpoint {have.get(k)} vs model {want.get(k)}'
             for k in sorted(set(have) | set(want)) if have.get(k) != want.get(k)]
    raise UserError(f'the encoder in checkpoint {step} of {directory} does not match '
                    f'{init_from}/config.json: {"; ".join(diffs[:5])}')
  if metadata_only:
    return None, step
  return run.read(target, ('params', 'bert')), step


def abstract_encoder(model_cfg: ModelConfig, mesh, axis_rules):
  """The encoder's parameters as ShapeDtypeStructs with their shardings on `mesh`.

  Args:
    model_cfg: the encoder's ModelConfig.
    mesh: the device mesh.
    axis_rules: logical axis rules (config.mesh.logical_axis_rules).
  Returns:
    A tree like BertModel's params (no head), of jax.ShapeDtypeStruct with shardings.
  """
  def init(rng):
    z = jnp.zeros((1, 8), jnp.int32)
    model = BertForSequenceClassification(model_cfg, 1)
    return model.init({'params': rng}, z, z, jnp.ones_like(z))['params']['bert']

  with nn.logical_axis_rules(axis_rules):
    boxed = jax.eval_shape(init, jax.random.key(0))
    shardings = sharding.logical_shardings(boxed, mesh, axis_rules)
  return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                      nn.unbox(boxed), shardings)
