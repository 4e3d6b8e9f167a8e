"""The FLOP counter: a hand-worked case, and agreement with the matrix products JAX traces."""

import math

import flax.linen as nn
import jax
import jax.extend
import jax.numpy as jnp
import pytest

from sharedbert.models import flops
from sharedbert.errors import UserError
from sharedbert.models import attention as attention_lib
from sharedbert.models.bert import BertForPretraining, ModelConfig
from sharedbert.pretrain_step import mlm_loss


def test_hand_worked_tiny_case():
  # B=2, T=4, D=8 (2 heads), FFN 16, V=10, one layer, 3 masked positions per row: 6 MLM rows.
  cfg = ModelConfig(attention='standard', vocab_size=10, hidden_size=8, num_layers=1,
                    num_heads=2, mlp_dim=16)
  f = flops.forward_flops(cfg, batch=2, seq_len=4, mlm_rows=6)
  assert f == {
      'qkv_projections': 3 * (2 * 8 * 8 * 8),   # three [8 tokens, 8] x [8, 8]: 3 * 1024
      'attention_scores': 2 * 2 * 2 * 4 * 4 * 4,  # 2 seqs * 2 heads * [4, 4] x [4, 4]: 512
      'attention_context': 512,
      'output_projection': 1024,
      'ffn': 2 * (2 * 8 * 16 * 8),              # [8, 8] x [8, 16] and back: 4096
      'mlm_transform': 2 * 6 * 8 * 8,           # 768
      'mlm_vocab_projection': 2 * 6 * 10 * 8,   # 960
  }
  assert sum(f.values()) == 10944
  assert flops.train_step_flops(cfg, 2, 4, 6) == 3 * 10944
  # shared runs one projection instead of three.
  shared = ModelConfig(attention='shared', vocab_size=10, hidden_size=8, num_layers=1,
                       num_heads=2, mlp_dim=16)
  assert flops.train_step_flops(shared, 2, 4, 6) == 3 * (10944 - 2 * 1024)
  # A head over every position (Hugging Face's BertForMaskedLM) runs 8 rows, not 6.
  every = flops.forward_flops(cfg, 2, 4, mlm_rows=8)
  assert every['mlm_vocab_projection'] == 2 * 8 * 10 * 8


def test_mfu():
  assert flops.mfu(100e9, 2.0, 100e9) == pytest.approx(0.5)
  assert math.isnan(flops.mfu(1.0, 0.0, 1.0))


def _dot_flops(jaxpr) -> int:
  """2*m*n*k summed over the dot_generals of a jaxpr that contract something (those that do
  not are broadcast multiplies, e.g. shared's diagonals), sub-jaxprs included."""
  total = 0
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'dot_general':
      lhs = eqn.invars[0].aval.shape
      (contracting, _), _ = eqn.params['dimension_numbers']
      if contracting:
        total += 2 * math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs[i] for i in contracting)
    for sub in jax.extend.core.jaxprs_in_params(eqn.params):
      total += _dot_flops(sub)
  return total


TINY = dict(vocab_size=50, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32,
            max_position_embeddings=16, dropout_rate=0.0, attention_dropout_rate=0.0,
            masa_atoms=1)


@pytest.mark.parametrize('attention,one_hot_embeddings',
                         [(v, False) for v in sorted(attention_lib.VARIANTS)]
                         + [('standard', True)])
def test_counter_matches_the_products_the_model_runs(attention, one_hot_embeddings):
  """For every registered variant: the counter equals the dot_generals JAX traces for the
  forward pass (less the [CLS] pooler, which the MLM loss does not use), and the gradient
  adds twice that (and the word table's one-hot gradient product, when it is on)."""
  cfg = ModelConfig.from_config({**TINY, 'attention': attention,
                                 'one_hot_embeddings': one_hot_embeddings})
  b, t, p = 3, 8, 2
  model = BertForPretraining(cfg)
  batch = {
      'input_ids': jnp.ones((b, t), jnp.int32), 'segment_ids': jnp.zeros((b, t), jnp.int32),
      'input_mask': jnp.ones((b, t), jnp.int32),
      'masked_positions': jnp.zeros((b, p), jnp.int32),
      'masked_ids': jnp.zeros((b, p), jnp.int32), 'masked_weights': jnp.ones((b, p)),
  }
  params = nn.unbox(jax.eval_shape(lambda: model.init(
      jax.random.key(0), batch['input_ids'], batch['segment_ids'], batch['input_mask'],
      batch['masked_positions']))['params'])
  loss = lambda prm: mlm_loss(model, prm, batch, None, True)[0]
  pooler = flops.matmul(b, cfg.hidden_size, cfg.hidden_size)
  traced_forward = _dot_flops(jax.make_jaxpr(loss)(params).jaxpr) - pooler
  counted_forward = sum(flops.forward_flops(cfg, b, t, mlm_rows=b * p).values())
  assert traced_forward == counted_forward
  traced_train = _dot_flops(jax.make_jaxpr(jax.value_and_grad(loss))(params).jaxpr) - pooler
  expected_train = flops.train_step_flops(cfg, b, t, mlm_rows=b * p)
  if attention == 'masa':
    # The atoms' gradient c[l] (outer) dW contracts nothing, so it is not among the traced.
    expected_train -= flops.forward_flops(cfg, b, t, b * p)['masa_kernels']
  assert traced_train == expected_train


def test_unknown_variant_is_a_user_error():
  class Unknown:
    attention, hidden_size, num_heads, mlp_dim, vocab_size, num_layers = 'x', 8, 2, 8, 8, 1
  with pytest.raises(UserError, match='no FLOP count'):
    flops.forward_flops(Unknown(), 1, 1, 1)
