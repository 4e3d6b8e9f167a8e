"""Checkpoints restore anywhere: a run trained on a (2,2,2) mesh opens on one device, on a
(1,8,1) mesh and in the example notebook, through `sharedbert.restore`."""

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

import sharedbert
from sharedbert import checkpoint as checkpoint_lib
from sharedbert import sharding
from sharedbert import pretrain_step
from sharedbert.errors import UserError
from test_sharding import assert_params_close, model_and_optimizer, once_per_session
from test_sharding import tiny_config, tiny_flags, write_corpus

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(REPO, 'notebooks', 'restore_example.ipynb')
TEXTS = ['the cat sat on a mat', 'seven dogs ran past the old red barn and a small bird sang']


@pytest.fixture(scope='module')
def workdir(request, tmp_path_factory):
  """Three steps of the tiny model on a (2,2,2) mesh of 8 CPU devices, through main."""
  def build(tmp):
    write_corpus(tmp / 'corpus.txt')
    # XLA_FLAGS: conftest's cheap CPU code generation (this run is nearly all compile time).
    env = dict(os.environ, JAX_PLATFORMS='cpu', JAX_NUM_CPU_DEVICES='8',
               TF_CPP_MIN_LOG_LEVEL='2')
    run = subprocess.run(
        [sys.executable, '-m', 'sharedbert.main',
         *tiny_flags(tmp / 'run', tmp / 'corpus.txt', mesh=(2, 2, 2))],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "mesh {'data': 2, 'fsdp': 2, 'tensor': 2}" in run.stderr

  return str(once_per_session(request, tmp_path_factory, 'restore_run', build) / 'run')


@pytest.fixture(scope='module')
def restored(workdir):
  return {'one device': sharedbert.restore(workdir, devices=jax.devices()[:1]),
          '1x8x1': sharedbert.restore(workdir, mesh={'data': 1, 'fsdp': 8, 'tensor': 1})}


def full_state(workdir, mesh_shape):
  """The whole train state (optimizer included), as a resumed run restores it on a mesh."""
  config = tiny_config(mesh_shape)
  mesh = sharding.make_mesh(config.mesh, jax.devices())
  model, tx, _ = model_and_optimizer(config)
  d = config.data
  shardings = pretrain_step.state_shardings(model, tx, mesh, sharding.rules(config), d.seq_len,
                                    d.max_predictions)
  target = pretrain_step.abstract_state(shardings, model, tx, d.seq_len, d.max_predictions)
  reader = checkpoint_lib.Checkpointer(workdir, None, read_only=True)
  try:
    state, _, step = reader.restore(target)
  finally:
    reader.close()
  assert step == 3
  return state


def test_parameters_restore_on_one_device_and_on_another_mesh(workdir, restored):
  saved = full_state(workdir, (2, 2, 2))
  one, other = restored['one device'], restored['1x8x1']
  assert one.step == other.step == 3
  assert_params_close(one.params, saved.params, atol=0)
  assert_params_close(other.params, saved.params, atol=0)
  # Placed as asked: everything on one device, or split 8 ways along the embedding axis.
  embedding = lambda r: r.params['bert']['embeddings']['word_embeddings']['embedding']
  assert embedding(one).sharding.device_set == {jax.devices()[0]}
  assert len(embedding(other).sharding.device_set) == 8
  assert embedding(other).addressable_shards[0].data.shape == (256, 8)
  assert one.config.model.hidden_size == 64 and one.config.model.attention == 'shared'
  assert 5 < one.tokenizer.vocab_size <= 256


def test_the_whole_train_state_restores_on_another_mesh(workdir):
  """A run resumed on another mesh gets the same state, optimizer moments included."""
  saved, moved = full_state(workdir, (2, 2, 2)), full_state(workdir, (1, 8, 1))
  for a, b in zip(jax.tree.leaves(saved), jax.tree.leaves(moved)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  spec = moved.opt_state[1][0].mu['bert']['layer_0']['mlp']['intermediate']['kernel'].sharding
  assert spec.spec == jax.sharding.PartitionSpec('fsdp', 'tensor')


def test_encode_is_the_same_on_every_mesh(restored):
  outs = [r.encode(TEXTS) for r in restored.values()]
  for out in outs:
    assert out['sequence_output'].shape == (2, 16, 64) and out['pooled_output'].shape == (2, 64)
    assert out['sequence_output'].dtype == np.float32
    assert np.all(np.abs(out['pooled_output']) <= 1)  # tanh
  np.testing.assert_allclose(outs[0]['sequence_output'], outs[1]['sequence_output'], atol=1e-5)
  np.testing.assert_allclose(outs[0]['pooled_output'], outs[1]['pooled_output'], atol=1e-5)
  mask = outs[0]['input_mask']
  assert mask[0].sum() < mask[1].sum() and mask[0, 0] == 1 and mask[0, -1] == 0
  # Padding changes nothing: the short text alone encodes as it does in the pair.
  alone = restored['one device'].encode(TEXTS[0])
  n = int(mask[0].sum())
  np.testing.assert_allclose(alone['sequence_output'][0, :n], outs[0]['sequence_output'][0, :n],
                             atol=1e-5)


def test_fill_mask(restored):
  one, other = restored['one device'], restored['1x8x1']
  guesses = one.fill_mask('the cat sat on a [MASK]', top_k=3)
  assert len(guesses) == 3
  scores = [g['score'] for g in guesses]
  assert scores == sorted(scores, reverse=True) and 0 < scores[-1] and sum(scores) <= 1
  for g in guesses:
    assert g['token_id'] >= 5 and g['token'] and '[MASK]' not in g['sequence']
    assert g['sequence'].startswith('the cat sat on a') and g['token'] in g['sequence']
  np.testing.assert_allclose(
      scores, [g['score'] for g in other.fill_mask('the cat sat on a [MASK]', top_k=3)],
      rtol=1e-4)
  two = one.fill_mask('the [MASK] sat on a [MASK]', top_k=2)
  assert len(two) == 2 and all(len(g) == 2 for g in two)
  assert all(g['sequence'].count('[MASK]') == 1 for g in two[0])
  with pytest.raises(UserError, match='no \\[MASK\\]'):
    one.fill_mask('the cat sat on a mat')
  # With a space before [MASK], the lone word-boundary piece is neither in the input nor ever
  # an answer, however many answers are asked for.
  tok = one.tokenizer
  space = tok.sp.piece_to_id('\u2581')
  assert tok.id_to_piece(space) == '\u2581'
  ids = tok.encode(['the cat sat on a [MASK] today'])[0]
  assert ids[ids.index(tok.mask_id) - 1] != space
  everything = one.fill_mask('the cat sat on a [MASK] today', top_k=tok.vocab_size)
  assert space not in [g['token_id'] for g in everything] and all(g['token'] for g in everything)


def test_restore_errors_are_user_errors(workdir, tmp_path):
  with pytest.raises(UserError, match='not a sharedbert workdir'):
    sharedbert.restore(str(tmp_path))
  with pytest.raises(UserError, match=r'no checkpoint at step 7 .*steps there: \[3\]'):
    sharedbert.restore(workdir, step=7)
  with pytest.raises(UserError, match='unknown mesh axes'):
    sharedbert.restore(workdir, mesh={'model': 8})
  # A config.json that does not describe the checkpoint's model.
  other = tmp_path / 'other'
  shutil.copytree(workdir, other)
  config = json.loads((other / 'config.json').read_text())
  config['model']['mlp_dim'] = 256
  (other / 'config.json').write_text(json.dumps(config))
  with pytest.raises(UserError, match=r'does not hold the parameters of the model .*'
                     r'mlp/intermediate/bias has shape \(128,\), the model \(256,\)'):
    sharedbert.restore(str(other), devices=jax.devices()[:1])


def test_the_example_notebook_runs(workdir, capsys):
  with open(NOTEBOOK) as f:
    notebook = json.load(f)
  cells = [''.join(c['source']) for c in notebook['cells'] if c['cell_type'] == 'code']
  assert cells and "workdir = '/tmp/sharedbert_demo'" in cells[0]
  cells[0] = cells[0].replace("'/tmp/sharedbert_demo'", repr(workdir))
  namespace = {}
  for source in cells:
    exec(compile(source, NOTEBOOK, 'exec'), namespace)  # noqa: S102 - our own notebook.
  printed = capsys.readouterr().out
  assert 'step 3: shared attention' in printed
  assert len(namespace['run'].fill_mask('Return the [MASK] of the list.')) == 5


def test_a_damaged_latest_step_falls_back_to_the_one_before(workdir, tmp_path, restored):
  copy = tmp_path / 'run'
  shutil.copytree(workdir, copy)
  shutil.copytree(copy / 'checkpoints' / '3', copy / 'checkpoints' / '2')
  shutil.rmtree(copy / 'checkpoints' / '3' / 'state' / 'd')  # The array data of step 3.
  run = sharedbert.restore(str(copy), devices=jax.devices()[:1])
  assert run.step == 2
  assert_params_close(run.params, restored['one device'].params, atol=0)
  with pytest.raises(Exception):
    sharedbert.restore(str(copy), step=3, devices=jax.devices()[:1])


def test_a_notebook_opens_a_run_without_tensorflow_and_then_uses_transformers(workdir,
                                                                               tmp_path):
  """Issue 56: `import sharedbert; sharedbert.restore(w)` in a fresh interpreter, then
  encode and fill_mask, load no TensorFlow (TensorFlow beside triton, which transformers'
  pipelines import with a CUDA torch wheel, crashed the process). Then, in the same process,
  the run's export goes through transformers' fill-mask pipeline, where torch and
  transformers are installed (they are not test dependencies)."""
  from sharedbert.convert import hf as convert_hf
  exported = tmp_path / 'hf'
  convert_hf.export_hf(workdir, str(exported))
  code = f'''
import importlib.util, sys
import sharedbert
run = sharedbert.restore({workdir!r})
run.encode(['the cat sat on a mat'])
top = run.fill_mask('the cat sat on a [MASK]')
assert 'tensorflow' not in sys.modules, 'restore loaded tensorflow'
print('restored', run.step, len(top))
if importlib.util.find_spec('transformers') and importlib.util.find_spec('torch'):
  from transformers import pipeline
  fill = pipeline('fill-mask', model={str(exported)!r}, trust_remote_code=True)
  print('pipeline', len(fill('the cat sat on a [MASK]')))
'''
  env = dict(os.environ, JAX_PLATFORMS='cpu', TF_CPP_MIN_LOG_LEVEL='2')
  done = subprocess.run([sys.executable, '-c', code], cwd=REPO, env=env, capture_output=True,
                        text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  lines = done.stdout.splitlines()
  assert lines[0].startswith('restored 3 ')
  has_hf = subprocess.run([sys.executable, '-c', 'import torch, transformers'],
                          capture_output=True).returncode == 0
  assert (lines[1:] == ['pipeline 5']) if has_hf else (lines[1:] == [])


def test_one_reader_opens_a_run_for_restore_fine_tuning_and_export(workdir, restored):
  """sharedbert.runs.open_run is what restore, fine-tuning's init_from and the exporter read
  through: the same config, vocabulary, step and arrays."""
  from sharedbert import runs
  from sharedbert.convert import hf as convert_hf
  from sharedbert.tasks import pretrained as pretrained_lib
  run = runs.open_run(workdir)
  assert run.steps == (3,) and run.step == 3 and run.model_config.attention == 'shared'
  assert run.tokenizer.vocab_size == restored['one device'].tokenizer.vocab_size
  assert run.saved_shapes(('params', 'bert', 'embeddings', 'word_embeddings')) == {
      'embedding': (256, 64)}
  assert run.saved_shapes(('params', 'nothing')) is None
  # The exporter's numpy copy and the fine-tuning encoder equal restore's parameters.
  cfg, params, meta, step = convert_hf.read_params(workdir)
  assert step == 3 and cfg == run.model_config and meta['model']['attention'] == 'shared'
  assert_params_close(params, restored['one device'].params, atol=0)
  mesh = sharding.make_mesh({'data': 1, 'fsdp': 1, 'tensor': 1}, jax.devices()[:1])
  target = pretrained_lib.abstract_encoder(run.model_config, mesh, sharding.rules(run.config))
  encoder, step = pretrained_lib.restore_encoder_params(workdir, target)
  assert step == 3
  assert_params_close(encoder, restored['one device'].params['bert'], atol=0)
  assert pretrained_lib.open_pretrained(workdir).model_config == run.model_config
  with pytest.raises(UserError, match='no checkpoint at step 7 .* steps there: \\[3\\]'):
    runs.open_run(workdir, 7)
  with pytest.raises(ValueError, match='required, optional or skip'):
    runs.open_run(workdir, vocab='maybe')


def test_no_module_but_checkpoint_py_calls_orbax():
  """Checkpoints are read and written in one place (sharedbert/checkpoint.py)."""
  root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'sharedbert')
  callers = []
  for folder, _, files in os.walk(root):
    for name in files:
      path = os.path.join(folder, name)
      if name.endswith('.py') and path != os.path.join(root, 'checkpoint.py'):
        text = open(path, encoding='utf-8').read()
        if 'import orbax' in text or 'from orbax' in text:
          callers.append(os.path.relpath(path, root))
  assert callers == []
