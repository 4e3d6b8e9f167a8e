"""Sharded training on 8 fake CPU devices: every mesh trains like one device.

The tiny model here (one layer, 8 heads, width 64, FFN 128, vocabulary 256) has every
sharded dimension divisible by 8, so each mesh of 8 devices splits it evenly.
test_restore.py and test_multihost.py reuse `tiny_config` and `write_corpus`.

Regenerate the golden sharding table after a deliberate change to the rules or the
annotations with `PYTHONPATH=. python tests/test_sharding.py --update-golden`, and review the diff.
"""

import fcntl
import json
import os
import pickle
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sharedbert import config as config_lib
from sharedbert import sharding
from sharedbert import pretrain_step
from sharedbert import optim as optim_lib
from sharedbert.data.pretrain import mask_rows
from sharedbert.errors import UserError
from sharedbert.models.bert import BertForPretraining, ModelConfig

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'golden',
                      'sharding_2x2x2.json')
MESHES = [(8, 1, 1), (2, 2, 2), (1, 4, 2), (1, 1, 8)]
STEPS = 3
TINY_MODEL = dict(num_layers=1, hidden_size=64, num_heads=8, mlp_dim=128, vocab_size=256)
WORDS = ('the cat sat on a mat while seven dogs ran past the old red barn and a small bird '
         'sang of rain wind and snow in the north field').split()


def tiny_config(mesh=(1, 1, 1), attention='shared'):
  """The `tiny` preset shrunk to seconds, under BERT's recipe: dropout stays on (it must
  shard like the rest), and the golden table is of the post-LN tree."""
  config = config_lib.pretrain_config(attention, 'tiny,recipe=bert')
  config.model.update(TINY_MODEL)
  config.data.update(seq_len=32, batch_size=16, max_predictions=5, eval_fraction=0.1)
  config.mesh.data, config.mesh.fsdp, config.mesh.tensor = mesh
  config.total_steps = STEPS
  config.log_every_steps = 1
  config.eval_every_steps = STEPS
  config.eval_batches = 1
  config.ckpt.every_steps = STEPS
  return config


def write_corpus(path, num_docs=300, seed=0):
  """Markov-ish text: each word tends to be followed by the next in WORDS."""
  rng = np.random.default_rng(seed)
  docs = []
  for _ in range(num_docs):
    i = rng.integers(len(WORDS))
    words = []
    for _ in range(rng.integers(20, 60)):
      words.append(WORDS[i])
      i = (i + 1) % len(WORDS) if rng.random() < 0.8 else rng.integers(len(WORDS))
    docs.append(' '.join(words) + '.')
  path.write_text('\n\n'.join(docs), encoding='utf-8')


def once_per_session(request, tmp_path_factory, name, build):
  """Runs `build(directory)` once per test session, even when pytest-xdist spreads the tests
  that need it over several workers (they share the session's base temporary directory);
  returns the directory."""
  base = tmp_path_factory.getbasetemp()
  if hasattr(request.config, 'workerinput'):  # An xdist worker: base is per worker.
    base = base.parent
  directory = base / name
  with open(base / f'{name}.lock', 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not (directory / 'DONE').exists():
      directory.mkdir(exist_ok=True)
      build(directory)
      (directory / 'DONE').touch()
  return directory


def tiny_flags(workdir, corpus, mesh=None):
  """`tiny_config` as command-line flags of sharedbert.main, training on `corpus`."""
  model = [f'--config.model.{k}={v}' for k, v in TINY_MODEL.items()]
  mesh = [f'--config.mesh.{a}={n}' for a, n in zip(sharding.MESH_AXES, mesh)] if mesh else []
  return ['--config=configs/shared_base.py:tiny,recipe=bert', f'--workdir={workdir}',
          f'--config.data.corpus={corpus}', *model, '--config.data.batch_size=16',
          '--config.data.seq_len=32', '--config.data.max_predictions=5',
          '--config.data.eval_fraction=0.1', f'--config.total_steps={STEPS}',
          '--config.log_every_steps=1', f'--config.eval_every_steps={STEPS}',
          '--config.eval_batches=1', f'--config.ckpt.every_steps={STEPS}', *mesh]


def synthetic_batches(config, steps=STEPS, seed=0):
  """Global batches of random tokens with some padding, masked like the real pipeline."""
  d, vocab = config.data, config.model.vocab_size
  rng = np.random.default_rng(seed)
  batches = []
  for step in range(steps):
    rows = rng.integers(5, vocab, (d.batch_size, d.seq_len)).astype(np.int32)
    rows[:, 0] = 2  # [CLS]
    rows[::3, d.seq_len // 2:] = 0  # Padding in every third row.
    keys = np.stack([np.zeros(d.batch_size, int), step * d.batch_size + np.arange(d.batch_size)], 1)
    batches.append(mask_rows(rows, keys, seed=0, mask_rate=d.mask_rate,
                             max_predictions=d.max_predictions, vocab_size=vocab))
  return batches


def model_and_optimizer(config):
  model = BertForPretraining(ModelConfig.from_config(config.model))
  tx, schedule = optim_lib.make_optimizer(config.optim, config.total_steps)
  return model, tx, schedule


# The train step is compiled with LLVM's optimizations off: a third of the compile time on
# CPU, and the same partitioned program (what these tests are about).
FAST_COMPILE = {'xla_backend_optimization_level': 0}


def state_shardings(config, mesh):
  model, tx, _ = model_and_optimizer(config)
  return pretrain_step.state_shardings(model, tx, mesh, sharding.rules(config), config.data.seq_len,
                               config.data.max_predictions)


def initial_state(config, devices):
  model, tx, _ = model_and_optimizer(config)
  mesh = sharding.make_mesh(config.mesh, devices)
  init_rng = jax.random.split(jax.random.key(config.seed))[0]  # As train_and_evaluate.
  d = config.data
  state, _ = pretrain_step.create_train_state(model, tx, init_rng, mesh, sharding.rules(config),
                                      d.seq_len, d.max_predictions)
  return jax.device_get(state)


def train_steps(config, devices, batches, start):
  """Runs the training loop's jitted step on a mesh of `devices`, from the host state `start`.

  Returns (losses, final state, state shardings).
  """
  mesh = sharding.make_mesh(config.mesh, devices)
  axis_rules = sharding.rules(config)
  model, tx, schedule = model_and_optimizer(config)
  dropout_rng = jax.random.split(jax.random.key(config.seed))[1]  # As train_and_evaluate.
  shardings = state_shardings(config, mesh)
  state = jax.device_put(start, shardings)
  step_fn, _ = pretrain_step.jit_steps(model, tx, schedule, mesh, shardings, dropout_rng,
                               config.optim.grad_accum_steps)
  losses = []
  with jax.set_mesh(mesh), nn.logical_axis_rules(axis_rules):
    compiled = step_fn.lower(state, sharding.global_batch(batches[0], mesh)).compile(FAST_COMPILE)
    for batch in batches:
      state, metrics = compiled(state, sharding.global_batch(batch, mesh))
      losses.append(float(metrics['loss']))
  return np.array(losses), state, shardings


def flat_params(params) -> dict[str, np.ndarray]:
  flat = jax.tree_util.tree_leaves_with_path(jax.device_get(params))
  return {'/'.join(k.key for k in path): np.asarray(v) for path, v in flat}


def assert_params_close(actual, expected, atol=2e-6):
  a, e = flat_params(actual), flat_params(expected)
  assert a.keys() == e.keys()
  worst = max(a, key=lambda k: float(np.max(np.abs(a[k] - e[k]))))
  np.testing.assert_allclose(a[worst], e[worst], rtol=0, atol=atol, err_msg=worst)


def partition_table(config, mesh) -> dict[str, str]:
  """Parameter path -> PartitionSpec on `mesh`, from the logical annotations and rules."""
  model, _, _ = model_and_optimizer(config)
  axis_rules = sharding.rules(config)
  d = config.data
  with nn.logical_axis_rules(axis_rules):
    boxed = jax.eval_shape(
        lambda r: pretrain_step.init_params(model, r, d.seq_len, d.max_predictions), jax.random.key(0))
    shardings = sharding.logical_shardings(boxed, mesh, axis_rules)
  flat = jax.tree_util.tree_leaves_with_path(shardings)
  return {'/'.join(k.key for k in path): str(tuple(s.spec)) for path, s in flat}


def golden_tables() -> dict[str, dict[str, str]]:
  mesh = sharding.make_mesh(tiny_config((2, 2, 2)).mesh, jax.devices()[:8])
  return {attention: partition_table(tiny_config((2, 2, 2), attention), mesh)
          for attention in ('standard', 'shared')}


# ---------------------------------------------------------------------------------------


def test_mesh_sizes_from_config():
  assert sharding.mesh_shape({'data': -1, 'fsdp': 2, 'tensor': 2}, 8) == (2, 2, 2)
  assert sharding.mesh_shape({'data': 1, 'fsdp': -1, 'tensor': 1}, 8) == (1, 8, 1)
  for bad in ({'data': -1, 'fsdp': -1, 'tensor': 1}, {'data': 3, 'fsdp': 1, 'tensor': 1},
              {'data': -1, 'fsdp': 3, 'tensor': 1}, {'data': 0, 'fsdp': 8, 'tensor': 1}):
    with pytest.raises(UserError, match='mesh'):
      sharding.mesh_shape(bad, 8)


def test_parameter_shardings_match_the_golden_table():
  with open(GOLDEN) as f:
    golden = json.load(f)
  assert golden == golden_tables()


def test_each_process_feeds_one_block_of_the_batch():
  for shape in MESHES:
    mesh = sharding.make_mesh(tiny_config(shape).mesh, jax.devices())
    assert sharding.process_batch_block(mesh) == (0, 1)  # One process holds every row.


def test_a_mesh_that_does_not_divide_a_dimension_is_a_user_error():
  config = tiny_config((1, 1, 8))
  config.model.num_heads = 2  # 2 heads cannot be split over 8 devices.
  mesh = sharding.make_mesh(config.mesh, jax.devices())
  model, tx, _ = model_and_optimizer(config)
  with pytest.raises(UserError, match=r'attention/diag has shape \(3, 2, 32\): its dimension 1 '
                     r"\(size 2, logical axis 'heads'\) cannot be split over mesh.tensor=8"):
    pretrain_step.create_train_state(model, tx, jax.random.key(0), mesh, sharding.rules(config), 32, 5)


def test_initialization_on_a_mesh_equals_one_device(one_device_run):
  """The state is created in its sharded layout; its values do not depend on the mesh."""
  _, start, _, _ = one_device_run
  sharded = initial_state(tiny_config((1, 4, 2)), jax.devices())
  assert_params_close(sharded.params, start.params, atol=0)


@pytest.fixture(scope='module')
def one_device_run(request, tmp_path_factory):
  """Three steps on one device, dropout off (so that test_accumulated_... can compare too;
  test_multihost.py compares runs with dropout on): (batches, start, losses, final state)."""
  def build(directory):
    config = no_dropout(tiny_config())
    batches = synthetic_batches(config)
    start = initial_state(config, jax.devices()[:1])
    losses, state, _ = train_steps(config, jax.devices()[:1], batches, start)
    with open(directory / 'run.pkl', 'wb') as f:
      pickle.dump((batches, start, losses, jax.device_get(state)), f)

  directory = once_per_session(request, tmp_path_factory, 'one_device_run', build)
  with open(directory / 'run.pkl', 'rb') as f:
    return pickle.load(f)


def no_dropout(config):
  config.model.update(dropout_rate=0.0, attention_dropout_rate=0.0)
  return config


@pytest.mark.parametrize('mesh_shape', MESHES, ids=lambda s: 'x'.join(map(str, s)))
def test_every_mesh_trains_like_one_device(mesh_shape, one_device_run):
  batches, start, ref_losses, ref_state = one_device_run
  config = no_dropout(tiny_config(mesh_shape))
  losses, state, shardings = train_steps(config, jax.devices(), batches, start)
  np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
  assert np.all(np.diff(ref_losses) != 0)  # Three different steps, not one repeated.
  assert_params_close(state.params, ref_state.params)
  # The state stays where the rules put it: parameters and both Adam moments alike.
  expected = [s.spec for s in jax.tree.leaves(shardings.params)]
  adam = state.opt_state[1][0]
  for tree in (state.params, adam.mu, adam.nu):
    assert [x.sharding.spec for x in jax.tree.leaves(tree)] == expected
  if mesh_shape == (2, 2, 2):
    with open(GOLDEN) as f:
      golden = json.load(f)['shared']
    actual = {k: str(tuple(v.sharding.spec)) for k, v in zip(
        flat_params(state.params), jax.tree.leaves(state.params))}
    assert actual == golden


@pytest.mark.parametrize('attention', ['kv_shared', 'single', 'q_identity'])
def test_newer_variants_on_a_mesh_train_like_one_device(attention):
  """Issue 31's variants (the others are covered above and in the golden table): three
  steps on a (2,2,2) mesh equal three steps on one device, from the same start."""
  one = no_dropout(tiny_config((1, 1, 1), attention))
  batches = synthetic_batches(one)
  start = initial_state(one, jax.devices()[:1])
  ref_losses, ref_state, _ = train_steps(one, jax.devices()[:1], batches, start)
  losses, state, _ = train_steps(no_dropout(tiny_config((2, 2, 2), attention)), jax.devices(),
                                 batches, start)
  np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
  assert np.all(np.diff(ref_losses) != 0)
  # A key bias adds one constant to each query's scores, which softmax ignores: its exact
  # gradient is 0, and Adam turns the rounding noise in its place into steps of size lr,
  # different on every mesh. Every other parameter must match.
  drop_key_bias = lambda p: jax.tree_util.tree_map_with_path(
      lambda path, x: None if "['key']['bias']" in jax.tree_util.keystr(path) else x,
      jax.device_get(p))
  assert_params_close(drop_key_bias(state.params), drop_key_bias(ref_state.params))


@pytest.mark.parametrize('attention', ['shared', 'symmetric'])
def test_rotary_positions_on_a_mesh_train_like_one_device(attention):
  """Rotary positions turn pairs of columns inside each head; the tensor axis splits the
  heads, so every pair stays on one device: three steps on a (1,2,4) mesh (4-way tensor, two
  heads a device) equal three steps on one device, a query phase included."""
  def rotary(config):
    config.model.update(position_embeddings='rotary', rope_query_phase=0.5)
    return no_dropout(config)
  one = rotary(tiny_config((1, 1, 1), attention))
  batches = synthetic_batches(one)
  start = initial_state(one, jax.devices()[:1])
  assert 'position_embeddings' not in start.params['bert']['embeddings']
  ref_losses, ref_state, _ = train_steps(one, jax.devices()[:1], batches, start)
  losses, state, _ = train_steps(rotary(tiny_config((1, 2, 4), attention)), jax.devices(),
                                 batches, start)
  np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
  assert np.all(np.diff(ref_losses) != 0)
  assert_params_close(state.params, ref_state.params)


def test_accumulated_micro_batches_equal_one_larger_batch(one_device_run):
  """4 micro-batches of 4 rows give the update of one batch of 16 rows; here on a (2,2,2)
  mesh with rematerialization on, against one device without."""
  batches, start, ref_losses, ref_state = one_device_run
  config = no_dropout(tiny_config((2, 2, 2)))
  config.model.remat = 'dots'
  config.optim.grad_accum_steps = 4
  losses, state, _ = train_steps(config, jax.devices(), batches, start)
  np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
  assert_params_close(state.params, ref_state.params)


def test_one_hot_embedding_gradient_on_a_mesh_equals_one_device(one_device_run):
  """model.one_hot_embeddings on a (2,2,2) mesh (its one-hot product contracts the sharded
  batch) trains like the scatter-add gradient on one device."""
  batches, start, ref_losses, ref_state = one_device_run
  config = no_dropout(tiny_config((2, 2, 2)))
  config.model.one_hot_embeddings = True
  losses, state, _ = train_steps(config, jax.devices(), batches, start)
  np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
  assert_params_close(state.params, ref_state.params)


def raw_gradients(config, devices, batch, params):
  """The gradient of one train step on a mesh of `devices`, read as the parameter change
  under plain SGD with learning rate 1 (no Adam, no clipping: they would hide its scale)."""
  import optax
  mesh = sharding.make_mesh(config.mesh, devices)
  axis_rules = sharding.rules(config)
  model = BertForPretraining(ModelConfig.from_config(config.model))
  tx = optax.sgd(1.0)
  d = config.data
  shardings = pretrain_step.state_shardings(model, tx, mesh, axis_rules, d.seq_len, d.max_predictions)
  zero = lambda: np.zeros((), np.int32)  # Three arrays: each is donated.
  start = pretrain_step.TrainState(step=zero(), params=params, opt_state=tx.init(params),
                           skipped=zero(), skipped_total=zero())
  state = jax.device_put(start, shardings)
  step_fn, _ = pretrain_step.jit_steps(model, tx, lambda step: 1.0, mesh, shardings,
                               jax.random.key(0), config.optim.grad_accum_steps)
  with jax.set_mesh(mesh), nn.logical_axis_rules(axis_rules):
    global_batch = sharding.global_batch(batch, mesh)
    compiled = step_fn.lower(state, global_batch).compile(FAST_COMPILE)
    state, metrics = compiled(state, global_batch)
  new = flat_params(state.params)
  return {k: v - new[k] for k, v in flat_params(params).items()}, float(metrics['grad_norm'])


def test_raw_gradients_are_the_same_on_every_mesh_and_with_accumulation(one_device_run):
  """The mean over all masked tokens of the global batch, whatever the mesh and the
  number of micro-batches: a gradient summed over devices or micro-batches instead of
  averaged would be off by a factor of 8 or 4 here."""
  batches, start, _, _ = one_device_run
  ref, ref_norm = raw_gradients(no_dropout(tiny_config()), jax.devices()[:1], batches[0],
                                start.params)
  assert ref_norm > 0.1 and sum(np.any(g != 0) for g in ref.values()) >= 0.9 * len(ref)
  config = no_dropout(tiny_config((2, 2, 2)))
  config.optim.grad_accum_steps = 4
  got, got_norm = raw_gradients(config, jax.devices(), batches[0], start.params)
  np.testing.assert_allclose(got_norm, ref_norm, rtol=1e-5)
  for key in ref:
    # A gradient read as p - (p - g) carries float32 rounding at the scale of p (LayerNorm
    # scales are 1): ~1e-7, while a wrong scale would be off by 3 to 7 times |g|.
    np.testing.assert_allclose(got[key], ref[key], rtol=0,
                               atol=3e-7 + 1e-5 * np.abs(ref[key]).max(), err_msg=key)


def test_bfloat16_compute_keeps_float32_parameters(one_device_run):
  """bfloat16 compute (with full rematerialization) trains float32 parameters."""
  batches, start, ref_losses, _ = one_device_run
  config = no_dropout(tiny_config((2, 2, 2)))
  config.model.update(dtype='bfloat16', remat='full')
  losses, state, _ = train_steps(config, jax.devices(), batches, start)
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.params))
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.opt_state)
             if jnp.issubdtype(x.dtype, jnp.floating))
  np.testing.assert_allclose(losses, ref_losses, atol=0.05)  # bfloat16 has 8 mantissa bits.
  assert not np.allclose(losses, ref_losses, rtol=1e-6, atol=0)  # It really ran in bfloat16.


if __name__ == '__main__':
  if sys.argv[1:] != ['--update-golden']:
    sys.exit('usage: python tests/test_sharding.py --update-golden')
  jax.config.update('jax_num_cpu_devices', 8)
  jax.config.update('jax_platforms', 'cpu')
  os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
  with open(GOLDEN, 'w') as f:
    json.dump(golden_tables(), f, indent=1, sort_keys=True)
    f.write('\n')
  print(f'wrote {GOLDEN}')
