"""FLOPs of the matrix products a pretraining step actually runs (for throughput and MFU).

The accounting of docs/design.md ("Throughput accounting", as MaxText counts it):
  - a matrix product [m, k] x [k, n] costs 2*m*n*k in the forward pass, and the backward pass
    costs twice the forward (one product for the input's gradient, one for the weight's);
  - attention scores (Q K^T) and context (P V) are counted in full: BERT's attention is
    bidirectional, so nothing is halved for causality;
  - the vocabulary projection runs only on the gathered masked positions (B*P rows), as
    `BertForPretraining` does; pass `mlm_rows=B*T` for a model that projects every position
    (Hugging Face's `BertForMaskedLM` in its standard usage);
  - each variant counts the projections it runs (its class's `qkv_flops`, in
    sharedbert/models/attention.py): `shared` one D x D product for Q, K and V, `standard`
    three, `symmetric` two, and so on; work that does not scale with the batch (masa's
    kernels) is its `extra_flops`;
  - rotary positions' rotation of Q and K is counted (3 FLOPs an element forward, as much
    again backward: `rotary`), so that a rotary model's count includes what it adds;
  - other elementwise work (softmax, GELU, LayerNorm, the shared diagonals, dropout), gathers and
    the embedding lookups are not counted (but the word table's one-hot gradient product of
    `model.one_hot_embeddings` is), and neither is the [CLS] pooler, whose output the
    MLM loss does not use (XLA removes it from the step).

`train_step_flops(model_cfg, batch, seq_len, mlm_rows)` is what a throughput report needs:
achieved FLOP/s = train_step_flops / step time; MFU = that / the device's peak.
"""

from __future__ import annotations

import math

from sharedbert.errors import UserError
# Each variant's class counts its own products, in the same unit.
from sharedbert.models.attention import VARIANTS
from sharedbert.models.layers import matmul
from sharedbert.models import rotary

# Backward = 2x forward, so one training step runs 3x the forward's products.
TRAIN_MULTIPLIER = 3


def _variant(cfg):
  if cfg.attention not in VARIANTS:
    raise UserError(f'sharedbert.models.flops has no FLOP count for the attention variant '
                    f'{cfg.attention!r}: it is not registered')
  return VARIANTS[cfg.attention]


def forward_flops(cfg, batch: int, seq_len: int, mlm_rows: int) -> dict[str, int]:
  """Forward-pass FLOPs by component, for the whole model and batch.

  Args:
    cfg: a `ModelConfig` (or anything with its fields).
    batch, seq_len: the batch's rows and tokens per row.
    mlm_rows: the rows the MLM head runs on (B*P for sharedbert, B*T for a head over every
      position).
  Returns:
    {component: FLOPs}: qkv_projections, attention_scores, attention_context,
    output_projection, ffn, the variant's extra terms, mlm_transform, mlm_vocab_projection,
    and `rotary` under rotary positions.
  """
  d, f, v, layers = cfg.hidden_size, cfg.mlp_dim, cfg.vocab_size, cfg.num_layers
  tokens = batch * seq_len
  variant = _variant(cfg)
  widths, extra_per_token = variant.qkv_flops(cfg)
  per_layer = {
      'qkv_projections': sum(matmul(tokens, w, d) for w in widths) + tokens * extra_per_token,
      # Scores Q K^T and context P V: per head [T, H] x [H, T] and [T, T] x [T, H], over all
      # heads and sequences: 2 * B * T * T * D each.
      'attention_scores': matmul(batch * seq_len, seq_len, d),
      'attention_context': matmul(batch * seq_len, d, seq_len),
      'output_projection': matmul(tokens, d, d),
      'ffn': matmul(tokens, f, d) + matmul(tokens, d, f),
  }
  if getattr(cfg, 'position_embeddings', 'learned') == 'rotary':
    # Rotary positions turn Q and K (elementwise: rotary.flops), the one elementwise work
    # counted here, as it is what a rotary model adds to a learned-table one.
    per_layer['rotary'] = 2 * rotary.flops(tokens, d)
  out = {k: layers * x for k, x in per_layer.items()}
  out.update(variant.extra_flops(cfg))
  out['mlm_transform'] = matmul(mlm_rows, d, d)
  out['mlm_vocab_projection'] = matmul(mlm_rows, v, d)
  return out


def train_step_flops(cfg, batch: int, seq_len: int, mlm_rows: int) -> int:
  """FLOPs of one training step's matrix products: forward plus backward (3x forward; the
  rotation of rotary positions 2x), and
  with `model.one_hot_embeddings` the word table's gradient, one_hot(ids)^T g (backward only:
  the forward lookup stays a gather).

  Args:
    cfg: the ModelConfig.
    batch, seq_len: the global batch's rows and tokens a row.
    mlm_rows: rows of the MLM head's output (batch * max_predictions).
  Returns:
    FLOPs of one optimizer step (2 per multiply-add), an int.
  """
  forward = forward_flops(cfg, batch, seq_len, mlm_rows)
  # A rotation's backward is one rotation (of the gradient, by -angle): 2x forward in all.
  rotation = forward.pop('rotary', 0)
  total = TRAIN_MULTIPLIER * sum(forward.values()) + 2 * rotation
  if getattr(cfg, 'one_hot_embeddings', False):
    total += matmul(batch * seq_len, cfg.vocab_size, cfg.hidden_size)
  return total


def mfu(flops_per_step: float, step_time_s: float, peak_flops_per_s: float) -> float:
  """Model FLOP utilization: achieved FLOP/s over the device's peak.

  Args:
    flops_per_step: model FLOPs a training step.
    step_time_s: seconds a step.
    peak_flops_per_s: the device's peak.
  Returns:
    A fraction.
  """
  if step_time_s <= 0 or peak_flops_per_s <= 0 or not math.isfinite(step_time_s):
    return float('nan')
  return flops_per_step / step_time_s / peak_flops_per_s
