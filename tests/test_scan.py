"""model.scan_layers: nn.scan over the encoder layers, against the unrolled stack.

The two layouts hold the same numbers (bert/layer_<i>/... against bert/layers/... with a
leading [L] axis; stack_layers / unstack_layers convert), so after converting, outputs,
gradients and training steps agree, and a checkpoint of either layout resumes in the other.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from sharedbert import checkpoint as checkpoint_lib
from sharedbert.models import params as params_lib
from sharedbert import pretrain_step
from sharedbert import optim as optim_lib
from sharedbert.config import DEFAULT_LOGICAL_AXIS_RULES
from sharedbert.errors import UserError
from sharedbert.models import attention as attention_lib
from sharedbert.models.bert import BertForPretraining, ModelConfig
from sharedbert.models.layout import stack_layers, to_layout, unstack_layers
from test_model import make_inputs

VARIANTS = ('standard', 'shared', 'shared_qk', 'symmetric', 'pairwise', 'partial_qk', 'masa',
            'kv_shared', 'single', 'q_identity')
TINY = dict(vocab_size=97, hidden_size=32, num_layers=3, num_heads=4, mlp_dim=64,
            max_position_embeddings=16, dropout_rate=0.0, attention_dropout_rate=0.0,
            masa_atoms=2)
INPUTS = make_inputs()
TOL = 1e-6  # Relative and absolute: logits reach ~30, where float32 rounding is ~1e-6.


def configs(attention, **kw):
  unrolled = ModelConfig.from_config({**TINY, **kw, 'attention': attention})
  return unrolled, dataclasses.replace(unrolled, scan_layers=True)


def init(cfg, seed=0):
  params = nn.unbox(BertForPretraining(cfg).init(jax.random.key(seed), *INPUTS)['params'])
  # Non-zero biases and non-unit LayerNorms, so that a misplaced layer shows.
  rng = np.random.default_rng(seed + 1)
  return jax.tree.map(lambda x: np.asarray(x) + 0.1 * rng.standard_normal(x.shape).astype(
      np.float32), params)


def close(a, b, tol=TOL):
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, atol=tol, rtol=tol), a, b)


@pytest.mark.parametrize('attention', VARIANTS)
def test_scanned_stack_computes_what_the_unrolled_one_does(attention):
  unrolled_cfg, scan_cfg = configs(attention)
  params = init(unrolled_cfg)
  stacked = stack_layers(params)
  # The scanned model's own tree: the same names and shapes.
  own = nn.unbox(jax.eval_shape(lambda: BertForPretraining(scan_cfg).init(
      jax.random.key(0), *INPUTS)['params']))
  assert jax.tree.map(lambda x: x.shape, own) == jax.tree.map(lambda x: x.shape, stacked)
  ref = BertForPretraining(unrolled_cfg).apply({'params': params}, *INPUTS,
                                               return_hidden_states=True)
  out = BertForPretraining(scan_cfg).apply({'params': stacked}, *INPUTS,
                                           return_hidden_states=True)
  assert len(out['hidden_states']) == unrolled_cfg.num_layers + 1
  close(out, ref)


@pytest.mark.parametrize('attention,remat', [('standard', 'none'), ('masa', 'none'),
                                             ('masa', 'full'), ('shared', 'dots')])
def test_gradients_agree_with_remat_inside_the_scan(attention, remat):
  """masa's dictionary reaches the scanned body from outside (broadcast): its gradient
  sums over the layers as in the unrolled stack."""
  unrolled_cfg, scan_cfg = configs(attention)
  scan_cfg = dataclasses.replace(scan_cfg, remat=remat)
  params = init(unrolled_cfg)

  def grads(cfg, prm):
    def loss(p):
      return BertForPretraining(cfg).apply({'params': p}, *INPUTS)['mlm_logits'].sum()
    return jax.grad(loss)(prm)
  close(grads(scan_cfg, stack_layers(params)), stack_layers(grads(unrolled_cfg, params)),
        tol=1e-5)


def test_layouts_round_trip_and_logical_axes():
  unrolled_cfg, scan_cfg = configs('masa')
  params = init(unrolled_cfg)
  stacked = stack_layers(params)
  assert 'layer_0' not in stacked['bert'] and stacked['bert']['layers']['mlp']['output'][
      'kernel'].shape == (3, 64, 32)
  assert 'shared_attention' in stacked['bert']  # Cross-layer params stay as they are.
  close(unstack_layers(stacked), params, tol=0)
  close(stack_layers(stacked), stacked, tol=0)  # Already stacked: unchanged.
  close(to_layout(stacked, False), params, tol=0)
  # Every stacked parameter leads with the 'layers' axis ('layers' -> no mesh axis).
  boxed = BertForPretraining(scan_cfg).init(jax.random.key(0), *INPUTS)['params']
  specs = nn.get_partition_spec(boxed)['bert']['layers']
  assert all(s[0] == 'layers' for s in jax.tree.leaves(
      specs, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec)))
  # The parameter report counts the same in both layouts.
  assert params_lib.parameter_counts(scan_cfg) == params_lib.parameter_counts(unrolled_cfg)


def optim_config():
  return ml_collections.ConfigDict(dict(lr=1e-3, warmup_steps=1, b1=0.9, b2=0.999, eps=1e-12,
                                        weight_decay=0.01, grad_clip_norm=1.0))


def batch():
  ids, segments, mask, positions = INPUTS
  return {'input_ids': ids, 'segment_ids': segments, 'input_mask': mask,
          'masked_positions': positions, 'masked_ids': np.take_along_axis(ids, positions, 1),
          'masked_weights': np.ones(positions.shape, np.float32)}


def state_for(params, tx):
  zero = jnp.zeros((), jnp.int32)
  return pretrain_step.TrainState(step=zero, params=params, opt_state=tx.init(params), skipped=zero,
                          skipped_total=zero)


def run_steps(cfg, state, tx, schedule, n=2):
  model = BertForPretraining(cfg)
  step = jax.jit(lambda s, b: pretrain_step.train_step(s, b, model=model, tx=tx, schedule=schedule,
                                               base_rng=jax.random.key(1), accum_steps=1))
  losses = []
  for _ in range(n):
    state, metrics = step(state, batch())
    losses.append(float(metrics['loss']))
  return state, losses


def test_train_steps_under_scan_equal_the_unrolled_ones():
  unrolled_cfg, scan_cfg = configs('masa')
  tx, schedule = optim_lib.make_optimizer(optim_config(), 10)
  params = jax.tree.map(jnp.asarray, init(unrolled_cfg))
  ref, ref_losses = run_steps(unrolled_cfg, state_for(params, tx), tx, schedule)
  # The optimizer state converts with the parameters (Adam's moments hold the same tree).
  start = to_layout(state_for(params, tx), True)
  out, losses = run_steps(scan_cfg, start, tx, schedule)
  np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
  assert losses[1] != losses[0]
  # The key bias is left out: softmax ignores it (q.b_k is the same for every key), so its
  # gradient is rounding noise, which Adam (eps 1e-12) scales up to a full step of either sign.
  ignore = lambda tree: jax.tree_util.tree_map_with_path(
      lambda path, x: 0.0 if '/key/bias' in jax.tree_util.keystr(path, simple=True,
                                                                  separator='/') else x, tree)
  close(ignore(out.params), ignore(stack_layers(ref.params)), tol=1e-5)
  close(ignore(out.opt_state), ignore(stack_layers(ref.opt_state)), tol=1e-5)


@pytest.mark.parametrize('saved_scan', [False, True])
def test_a_checkpoint_resumes_in_the_other_layout(saved_scan, tmp_path):
  unrolled_cfg, scan_cfg = configs('masa')
  saved_cfg, resumed_cfg = (scan_cfg, unrolled_cfg) if saved_scan else (unrolled_cfg, scan_cfg)
  tx, _ = optim_lib.make_optimizer(optim_config(), 10)
  mesh = jax.make_mesh((1, 1, 1), ('data', 'fsdp', 'tensor'), devices=jax.devices()[:1])
  rules = DEFAULT_LOGICAL_AXIS_RULES
  saved = to_layout(jax.tree.map(jnp.asarray, state_for(init(unrolled_cfg), tx)), saved_scan)
  ckpt = checkpoint_lib.Checkpointer(str(tmp_path), None)
  ckpt.save(4, saved, {'model': saved_cfg.to_dict(), 'data_position': 4}, force=True)
  ckpt.wait()
  ckpt.close()

  reader = checkpoint_lib.Checkpointer(str(tmp_path), None, read_only=True)
  model = BertForPretraining(resumed_cfg)
  shardings = pretrain_step.state_shardings(model, tx, mesh, rules, 8, 2)
  state, meta, step = pretrain_step.restore_state(reader, resumed_cfg, tx, mesh, rules, shardings, 8, 2)
  reader.close()
  assert step == 4 and meta['data_position'] == 4
  expected = to_layout(saved, resumed_cfg.scan_layers)
  assert jax.tree.structure(state) == jax.tree.structure(expected)
  close(state, expected, tol=0)


def test_a_variant_that_cannot_be_scanned_is_a_user_error():
  class NeedsIntIndex(attention_lib.StandardAttention):
    scannable = False
  attention_lib.register('needs_int_index')(NeedsIntIndex)
  try:
    ModelConfig.from_config({**TINY, 'attention': 'needs_int_index'})  # Unrolled: fine.
    with pytest.raises(UserError, match='cannot be scanned'):
      ModelConfig.from_config({**TINY, 'attention': 'needs_int_index', 'scan_layers': True})
  finally:
    del attention_lib.VARIANTS['needs_int_index']


def test_compile_time_harness():
  """tools/compile_time.py's measurement, on the smallest size (BENCHMARKS.md has BERT-base)."""
  from sharedbert.lab.bench import memory as bench_memory
  from sharedbert.lab.bench import sizes as bench_sizes
  row = bench_memory.step_compile_seconds(bench_sizes.SIZES['smoke'], 'standard', scan_layers=True)
  assert row['scan_layers'] and row['remat'] == 'none'
  assert row['compile_s'] > 0 and row['lower_s'] > 0 and row['memory_bytes'] > 0
