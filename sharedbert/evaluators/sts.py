"""Zero-shot semantic similarity of an encoder, and how far a converted encoder's layers
are from the original's: conversion quality measured on what the model is for.

  zero_shot_spearman: STS-B dev (a glue_data folder) -> each sentence's mean-pooled final
    hidden states (as sentence-transformers' mean pooling) -> the cosine of each pair ->
    Spearman correlation with the gold similarity. No training: a sentence encoder such as
    all-MiniLM-L6-v2 scores about 0.8 here, a random one about 0.
  layer_errors: the same texts through two encoders of one vocabulary; per layer,
    |h_a - h_b|_F / |h_a|_F over the real tokens.

As an evaluator (`sts` in config.evaluators), `ZeroShotSts` scores the encoder of the
parameters it is given, whatever task the run fine-tunes: STS-B dev from the run's GLUE
source (data.glue_dir or data.tfds_data_dir) unless its settings name one.
"""

from __future__ import annotations

import numpy as np
import jax.numpy as jnp
from scipy import stats as sp_stats

from sharedbert.evaluators import common
from sharedbert.evaluators import linear_probe
from sharedbert.data import glue
from sharedbert.errors import UserError
from sharedbert.models.bert import BertEncoder
from sharedbert.tasks import engine


def tokenize(tokenizer, texts, seq_len: int):
  """(ids [n, seq_len], segments, lengths) of single sentences.

  Args:
    tokenizer: the vocabulary.
    texts: sentences.
    seq_len: tokens a row.
  Returns:
    (ids, segments, lengths).
  """
  ids = np.zeros((len(texts), seq_len), np.int32)
  lengths = np.zeros((len(texts),), np.int32)
  for i, text in enumerate(texts):
    a, _ = tokenizer.encode_pair(text, None, seq_len)
    ids[i, :len(a)], lengths[i] = a, len(a)
  return ids, np.zeros_like(ids), lengths


def stsb_dev(glue_dir: str | None, max_examples: int = 0, tfds_data_dir: str | None = None):
  """(sentences a, sentences b, gold scores) of STS-B's dev set (a fixed subset of
  `max_examples` when set), from a glue_data folder or else tfds.

  Args:
    glue_dir: a glue_data folder, or None.
    max_examples: a fixed subset's size (0: all).
    tfds_data_dir: where tfds glue/stsb is prepared.
  Returns:
    (a, b, gold).
  """
  examples = engine.subset(glue.load_examples('stsb', 'validation', glue_dir=glue_dir or None,
                                              tfds_data_dir=tfds_data_dir or None),
                           max_examples)
  return ([ex.text_a for ex in examples], [ex.text_b for ex in examples],
          np.asarray([ex.label for ex in examples], np.float64))


def zero_shot_spearman(model_cfg, params, tokenizer, pairs, seq_len: int = 128) -> float:
  """Spearman correlation of cosine(mean-pooled a, mean-pooled b) with the gold scores.

  Args:
    model_cfg: the encoder's ModelConfig.
    params: its params.
    tokenizer: its vocabulary.
    pairs: (a, b, gold).
    seq_len: tokens a row.
  Returns:
    The correlation.
  """
  seq_len = min(seq_len, model_cfg.max_position_embeddings)
  a, b, gold = pairs
  ea, eb = (linear_probe.mean_pooled(model_cfg, params, *tokenize(tokenizer, texts, seq_len))
            for texts in (a, b))
  cos = np.sum(ea * eb, 1) / np.maximum(np.linalg.norm(ea, axis=1) * np.linalg.norm(eb, axis=1),
                                        1e-12)
  return float(sp_stats.spearmanr(cos, gold).statistic)


def hidden_states(model_cfg, params, ids, segments, lengths) -> list[np.ndarray]:
  """Each layer's output (the embeddings first), [n, T, D], float64.

  Args:
    model_cfg: the encoder's ModelConfig.
    params: its params.
    ids, segments: [n, T].
    lengths: [n].
  Returns:
    L + 1 arrays.
  """
  mask = (np.arange(ids.shape[1])[None] < lengths[:, None]).astype(np.int32)
  out = BertEncoder(model_cfg).apply({'params': params}, jnp.asarray(ids), jnp.asarray(segments),
                                     jnp.asarray(mask), return_hidden_states=True)
  return [np.asarray(h, np.float64) for h in out['hidden_states']]


def layer_errors(cfg_a, params_a, cfg_b, params_b, ids, segments, lengths) -> list[float]:
  """Per layer (after the embeddings), |h_a - h_b| / |h_a| over the real tokens.

  Args:
    cfg_a, params_a: the reference encoder.
    cfg_b, params_b: the other.
    ids, segments: [n, T].
    lengths: [n].
  Returns:
    One error a layer.
  """
  mask = (np.arange(ids.shape[1])[None] < lengths[:, None])[..., None]
  ha = hidden_states(cfg_a, params_a, ids, segments, lengths)
  hb = hidden_states(cfg_b, params_b, ids, segments, lengths)
  return [float(np.linalg.norm((x - y) * mask) / max(np.linalg.norm(x * mask), 1e-30))
          for x, y in zip(ha[1:], hb[1:])]


@common.register('sts')
class ZeroShotSts:
  """`zero_shot_spearman` of the encoder in `params['bert']` on STS-B dev.

  Args:
    run: a TaskRun or common.EncoderRun (pretrained.model_config and .tokenizer; its
      config.data locates GLUE when the settings do not).
    glue_dir: a glue_data folder holding STS-B ('' : the run's data.glue_dir).
    tfds_data_dir: tfds's data folder, read when no glue_dir is known.
    max_examples: a fixed subset of this many pairs (0: all 1,500).
    seq_len: tokens per sentence, at most the model's positions.
  """

  def __init__(self, run, *, glue_dir: str = '', tfds_data_dir: str = '',
               max_examples: int = 0, seq_len: int = 128):
    data = run.config.data if run.config is not None else None
    glue_dir = glue_dir or (data.glue_dir if data is not None else '')
    tfds_data_dir = tfds_data_dir or (data.tfds_data_dir if data is not None else '')
    self.model_config, self.tokenizer = run.pretrained.model_config, run.pretrained.tokenizer
    self.pairs = stsb_dev(glue_dir, int(max_examples), tfds_data_dir)
    if len(self.pairs[2]) < 3:
      raise UserError(f'sts: {len(self.pairs[2])} STS-B dev pairs; a correlation needs 3 or more')
    self.seq_len = int(seq_len)

  def run(self, params) -> dict:
    """{'spearman', 'pairs'}."""
    rho = zero_shot_spearman(self.model_config, params['bert'], self.tokenizer, self.pairs,
                             self.seq_len)
    return {'spearman': rho, 'pairs': len(self.pairs[2])}
