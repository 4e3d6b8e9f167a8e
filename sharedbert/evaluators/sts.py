"""Zero-shot semantic similarity of an encoder, and how far a converted encoder's layers
are from the original's: conversion quality measured on what the model is for.

  zero_shot_spearman: STS-B dev (a glue_data folder) -> each sentence's mean-pooled final
    hidden states (as sentence-transformers' mean pooling) -> the cosine of each pair ->
    Spearman correlation with the gold similarity. No training: a sentence encoder such as
    all-MiniLM-L6-v2 scores about 0.8 here, a random one about 0.
  layer_errors: the same texts through two encoders of one vocabulary; per layer,
    |h_a - h_b|_F / |h_a|_F over the real tokens.
"""

from __future__ import annotations

import numpy as np
import jax.numpy as jnp
from scipy import stats as sp_stats

from sharedbert.evaluators import linear_probe
from sharedbert.convert import hf as convert_hf
from sharedbert.data import glue
from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.errors import UserError
from sharedbert.models.bert import BertEncoder
from sharedbert.tasks import engine


def load_encoder(workdir: str):
  """(model config, encoder params, tokenizer) of a workdir's latest checkpoint."""
  model_cfg, params, _, _ = convert_hf.read_params(workdir)
  tokenizer = tokenizer_lib.load_workdir(workdir)
  if tokenizer is None:
    raise UserError(f'{workdir} holds no vocabulary')
  return model_cfg, params['bert'], tokenizer


def tokenize(tokenizer, texts, seq_len: int):
  """(ids [n, seq_len], segments, lengths) of single sentences."""
  ids = np.zeros((len(texts), seq_len), np.int32)
  lengths = np.zeros((len(texts),), np.int32)
  for i, text in enumerate(texts):
    a, _ = tokenizer.encode_pair(text, None, seq_len)
    ids[i, :len(a)], lengths[i] = a, len(a)
  return ids, np.zeros_like(ids), lengths


def stsb_dev(glue_dir: str, max_examples: int = 0):
  """(sentences a, sentences b, gold scores) of STS-B's dev set."""
  examples = engine.subset(glue.load_examples('stsb', 'validation', glue_dir=glue_dir), max_examples)
  return ([ex.text_a for ex in examples], [ex.text_b for ex in examples],
          np.asarray([ex.label for ex in examples], np.float64))


def zero_shot_spearman(model_cfg, params, tokenizer, pairs, seq_len: int = 128) -> float:
  """Spearman correlation of cosine(mean-pooled a, mean-pooled b) with the gold scores."""
  seq_len = min(seq_len, model_cfg.max_position_embeddings)
  a, b, gold = pairs
  ea, eb = (linear_probe.mean_pooled(model_cfg, params, *tokenize(tokenizer, texts, seq_len))
            for texts in (a, b))
  cos = np.sum(ea * eb, 1) / np.maximum(np.linalg.norm(ea, axis=1) * np.linalg.norm(eb, axis=1),
                                        1e-12)
  return float(sp_stats.spearmanr(cos, gold).statistic)


def hidden_states(model_cfg, params, ids, segments, lengths) -> list[np.ndarray]:
  """Each layer's output (the embeddings first), [n, T, D], float64."""
  mask = (np.arange(ids.shape[1])[None] < lengths[:, None]).astype(np.int32)
  out = BertEncoder(model_cfg).apply({'params': params}, jnp.asarray(ids), jnp.asarray(segments),
                                     jnp.asarray(mask), return_hidden_states=True)
  return [np.asarray(h, np.float64) for h in out['hidden_states']]


def layer_errors(cfg_a, params_a, cfg_b, params_b, ids, segments, lengths) -> list[float]:
  """Per layer (after the embeddings), |h_a - h_b| / |h_a| over the real tokens."""
  mask = (np.arange(ids.shape[1])[None] < lengths[:, None])[..., None]
  ha = hidden_states(cfg_a, params_a, ids, segments, lengths)
  hb = hidden_states(cfg_b, params_b, ids, segments, lengths)
  return [float(np.linalg.norm((x - y) * mask) / max(np.linalg.norm(x * mask), 1e-30))
          for x, y in zip(ha[1:], hb[1:])]
