"""What the benchmarks run: the benchmarked shapes (`SIZES`), the pretraining config of each
(`bench_config`, the `small` recipe reshaped), a synthetic masked batch, and the pieces of
sharedbert's training step that the timing and memory benchmarks compile."""

from __future__ import annotations

import dataclasses

import numpy as np

from sharedbert import config as config_lib
from sharedbert import optim as optim_lib
from sharedbert import sharding
from sharedbert.data.pretrain import mask_rows
from sharedbert.data.tokenizer import CLS_ID, NUM_SPECIAL
from sharedbert.models.bert import BertForPretraining, ModelConfig

GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Size:
  """One benchmark shape: the model, the batch, and how it computes."""
  num_layers: int
  hidden_size: int
  num_heads: int
  mlp_dim: int
  vocab_size: int
  batch: int
  seq_len: int = 128
  max_predictions: int = 20
  dtype: str = 'float32'
  attention_impl: str = 'xla'
  attention_dropout_rate: float = 0.1
  remat: str = 'none'
  one_hot_embeddings: bool = False

  def text(self) -> str:
    return (f'{self.num_layers} layers, D={self.hidden_size}, {self.num_heads} heads, '
            f'FFN {self.mlp_dim}, vocabulary {self.vocab_size}, batch {self.batch}, '
            f'sequence {self.seq_len}, {self.dtype}')


BERT_BASE = dict(num_layers=12, hidden_size=768, num_heads=12, mlp_dim=3072, vocab_size=30522)


SIZES = {
    'small': Size(4, 256, 4, 1024, 8192, batch=32),
    'base_width': Size(2, 768, 12, 3072, 8192, batch=16),
    # The GPU check: BERT-base, bfloat16, cuDNN's fused attention kernel, the fastest path
    # measured on an H200 (BENCHMARKS.md, GPU). Fused attention has no attention-probability
    # dropout (sharedbert falls back to the einsum path when it is on), so it is 0.
    'gpu_base': Size(**BERT_BASE, batch=256, dtype='bfloat16', attention_impl='cudnn',
                     attention_dropout_rate=0.0),
    # A/B sizes, each one change from gpu_base: jax.nn.dot_product_attention's default (XLA's)
    # implementation; the word table's gradient as a one-hot product (model.one_hot_embeddings)
    # instead of XLA:GPU's scatter-add.
    'gpu_base_fused': Size(**BERT_BASE, batch=256, dtype='bfloat16', attention_impl='fused',
                           attention_dropout_rate=0.0),
    'gpu_base_one_hot': Size(**BERT_BASE, batch=256, dtype='bfloat16', attention_impl='cudnn',
                             attention_dropout_rate=0.0, one_hot_embeddings=True),
    # The BERT recipe as configs/*_base.py trains it on a GPU: attention-probability dropout
    # 0.1, so the einsum softmax (no fused kernel takes dropout).
    'gpu_base_recipe': Size(**BERT_BASE, batch=256, dtype='bfloat16'),
    # Seconds on a CPU: for tests and quick checks of the harness.
    'smoke': Size(1, 32, 2, 64, 128, batch=8, seq_len=16, max_predictions=3),
    'smoke_fused_bf16': Size(1, 32, 2, 64, 128, batch=8, seq_len=16, max_predictions=3,
                             dtype='bfloat16', attention_impl='fused',
                             attention_dropout_rate=0.0),
}


def bench_config(size: Size, attention: str, remat: str | None = None,
                 positions: str = 'learned'):
  """The pretraining config of the `small` recipe, reshaped to `size`, with `positions`
  (model.position_embeddings)."""
  config = config_lib.pretrain_config(attention, 'size=small')
  m = config.model
  m.position_embeddings = positions
  for key in ('num_layers', 'hidden_size', 'num_heads', 'mlp_dim', 'vocab_size', 'dtype',
              'attention_impl', 'attention_dropout_rate', 'one_hot_embeddings'):
    m[key] = getattr(size, key)
  m.remat = remat or size.remat
  m.max_position_embeddings = max(m.max_position_embeddings, size.seq_len)
  config.data.batch_size = size.batch
  config.data.seq_len = size.seq_len
  config.data.max_predictions = size.max_predictions
  return config


def synthetic_batch(size: Size, seed: int = 0) -> dict[str, np.ndarray]:
  """Random full rows ([CLS] then tokens), masked by the pipeline's own `mask_rows`."""
  rng = np.random.default_rng(seed)
  rows = rng.integers(NUM_SPECIAL, size.vocab_size, (size.batch, size.seq_len), dtype=np.int32)
  rows[:, 0] = CLS_ID
  keys = np.stack([np.zeros(size.batch, np.int64), np.arange(size.batch)], axis=1)
  return mask_rows(rows, keys, seed=seed, mask_rate=0.15, max_predictions=size.max_predictions,
                   vocab_size=size.vocab_size)


def memory_bytes(compiled) -> int | None:
  """XLA's buffers for one call: arguments + outputs + temporaries, less donated aliases."""
  mem = compiled.memory_analysis()
  if mem is None:
    return None
  return int(mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
             - mem.alias_size_in_bytes)


def step_parts(config):
  mesh = sharding.make_mesh(config.mesh)
  axis_rules = sharding.rules(config)
  model_cfg = ModelConfig.from_config(config.model)
  model = BertForPretraining(model_cfg)
  tx, schedule = optim_lib.make_optimizer(config.optim, config.total_steps)
  return mesh, axis_rules, model_cfg, model, tx, schedule
