"""The budget recipe, the learning-rate schedule as applied, and the held-out set's size."""

import glob
import importlib.util
import math
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from sharedbert import config as sb_config
from sharedbert import optim as optim_lib
from sharedbert.data import pretrain
from sharedbert.data import sources
from sharedbert.errors import UserError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANT_CONFIGS = sorted(glob.glob(os.path.join(REPO, 'configs', '*_base.py')))


def load_config(path, arg):
  spec = importlib.util.spec_from_file_location('cfg', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def flat(config, prefix=''):
  out = {}
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict):
      out.update(flat(value, f'{prefix}{key}.'))
    else:
      out[prefix + key] = value
  return out


@pytest.mark.parametrize('path', VARIANT_CONFIGS, ids=os.path.basename)
@pytest.mark.parametrize('size', ['tiny', 'cpu30', 'small', 'base'])
def test_the_budget_recipe_changes_exactly_its_keys_for_every_variant(path, size):
  bert = flat(load_config(path, f'size={size},recipe=bert'))
  budget = flat(load_config(path, f'size={size},recipe=budget'))
  changed = {k for k in bert if bert[k] != budget[k]}
  expected = sb_config.recipe_overrides('budget', config=load_config(path, f'size={size},recipe=bert'))
  assert set(bert) == set(budget)
  # Every budget key is set to its value; a key already at that value is not a change.
  assert changed == {k for k, v in expected.items() if bert[k] != v}
  assert all(budget[k] == v for k, v in expected.items())
  assert changed  # The recipe changes something at every size.


@pytest.mark.parametrize('path', VARIANT_CONFIGS, ids=os.path.basename)
def test_base_keeps_berts_recipe_and_the_cpu_presets_take_the_budget_one(path):
  assert flat(load_config(path, 'size=base')) == flat(load_config(path, 'size=base,recipe=bert'))
  for size in ('tiny', 'cpu30', 'small'):
    assert flat(load_config(path, size)) == flat(load_config(path, f'size={size},recipe=budget'))
  base = load_config(path, None)
  assert (base.optim.lr, base.optim.warmup_steps, base.model.dropout_rate,
          base.model.pre_layer_norm, base.data.mask_rate) == (1e-4, 10_000, 0.1, False, 0.15)


def test_unknown_recipe_is_refused():
  with pytest.raises(UserError, match="unknown recipe 'fast'; choose one of bert, budget"):
    sb_config.pretrain_config('shared', 'tiny,recipe=fast')
  with pytest.raises(UserError, match='unknown budget-recipe groups'):
    sb_config.recipe_overrides('budget', without=('nope',))


def optim_cfg(**kw):
  base = dict(lr=1e-3, warmup_steps=4, weight_decay=0.01, b1=0.9, b2=0.999, eps=1e-12,
              grad_clip_norm=1.0)
  base.update(kw)
  return ml_collections.ConfigDict(base)


def test_schedule_warms_up_from_the_first_step_and_reaches_zero_at_the_last():
  schedule = optim_lib.learning_rate_schedule(optim_cfg(), 12)
  lrs = [float(schedule(s)) for s in range(12)]
  np.testing.assert_allclose(lrs[:4], [2.5e-4, 5e-4, 7.5e-4, 1e-3], rtol=1e-6)
  assert lrs[-1] == 0.0 and all(a >= b for a, b in zip(lrs[3:], lrs[4:]))
  np.testing.assert_allclose(lrs[4:], [1e-3 * (11 - s) / 7 for s in range(4, 12)], rtol=1e-5)


def test_the_logged_rate_is_the_applied_one_also_after_a_skipped_step():
  """Step 1 is non-finite (skipped); step 2's update must use schedule(2), the logged rate."""
  optim = optim_cfg(weight_decay=0.0, grad_clip_norm=1e9)
  tx, schedule = optim_lib.make_optimizer(optim, 10)
  params = {'w': jnp.ones(3)}
  opt_state = tx.init(params)
  grads = [{'w': jnp.full(3, 0.5)}, {'w': jnp.full(3, jnp.nan)}, {'w': jnp.full(3, 0.5)}]
  history = []
  for step, g in enumerate(grads):
    finite = jnp.all(jnp.isfinite(g['w']))
    updates, new_state = tx.update(g, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    params = jax.tree.map(lambda a, b: jnp.where(finite, a, b), new_params, params)
    opt_state = optim_lib.keep_moments_advance_schedule(finite, new_state, opt_state)
    history.append((step, params['w'][0]))
  # Adam's first update with a constant gradient has size lr (bias-corrected m/sqrt(v) = 1);
  # the second applied update (step 2) too, since the gradient is the same.
  moved_0 = 1.0 - float(history[0][1])
  moved_2 = float(history[1][1]) - float(history[2][1])
  assert float(history[1][1]) == float(history[0][1])  # The skipped step changed nothing.
  np.testing.assert_allclose(moved_0, float(schedule(0)), rtol=1e-4)
  np.testing.assert_allclose(moved_2, float(schedule(2)), rtol=1e-4)


def test_max_predictions_follows_the_mask_rate_by_default():
  d = ml_collections.ConfigDict(dict(mask_rate=0.15, seq_len=128, max_predictions=0))
  assert pretrain.max_predictions(d) == 20  # BERT's figure at length 128.
  d.seq_len = 512
  assert pretrain.max_predictions(d) == 77
  d.update(mask_rate=0.4, seq_len=128)
  assert pretrain.max_predictions(d) == math.ceil(0.4 * 128)
  d.max_predictions = 7
  assert pretrain.max_predictions(d) == 7
  # The derived cap never cuts the rate: a full row of 127 tokens gets round(0.4 * 127).
  rows = np.full((1, 128), 100, np.int32)
  rows[0, 0] = pretrain.CLS_ID
  d.max_predictions = 0
  batch = pretrain.mask_rows(rows, np.zeros((1, 2), np.int64), seed=0, mask_rate=0.4,
                             max_predictions=pretrain.max_predictions(d), vocab_size=500)
  assert batch['masked_weights'].sum() == round(0.4 * 127)


def test_a_small_held_out_set_is_used_once_without_wrapping(tmp_path):
  corpus = tmp_path / 'corpus.txt'
  words = [f'w{i}' for i in range(60)]
  rng = np.random.default_rng(0)
  corpus.write_text('\n\n'.join(' '.join(rng.choice(words, 40)) for _ in range(300)))
  config = sb_config.pretrain_config('standard', f'size=tiny,corpus={corpus}')
  config.model.vocab_size = 128
  config.data.update(seq_len=32, batch_size=16, eval_fraction=0.1, vocab_train_sentences=1000)
  config.eval_batches = 0
  data = pretrain.PretrainData(config, str(tmp_path / 'vocab.model'))
  docs = sources.split_documents(sources.in_memory_documents(str(corpus)), 'eval', 0.1)
  expected = pretrain.pack(data.tokenizer.encode(docs), 32)
  assert 16 < len(expected) and len(expected) % 16  # More than a batch, not a multiple.
  originals = []
  for b in data.eval_batches:
    rows = b['input_ids'].copy()
    for r in range(len(rows)):  # Undo the masking.
      keep = b['masked_weights'][r] > 0
      rows[r, b['masked_positions'][r][keep]] = b['masked_ids'][r][keep]
    originals.append(rows)
  originals = np.concatenate(originals)
  # Every held-out row once, in order; then [PAD] rows (nothing masked) to fill the batch.
  assert len(originals) == -(-len(expected) // 16) * 16
  np.testing.assert_array_equal(originals[:len(expected)], expected)
  assert (originals[len(expected):] == pretrain.PAD_ID).all()
  weights = np.concatenate([b['masked_weights'] for b in data.eval_batches])
  assert weights[len(expected):].sum() == 0 and weights[:len(expected)].sum() > 0


def test_the_ablation_command_trains_each_arm_for_the_budget_and_reports(tmp_path):
  import json
  import subprocess
  import sys
  corpus = tmp_path / 'corpus.txt'
  rng = np.random.default_rng(0)
  words = [f'w{i}' for i in range(80)]
  corpus.write_text('\n\n'.join(' '.join(rng.choice(words, 60)) for _ in range(200)))
  out = tmp_path / 'out'
  env = dict(os.environ, JAX_PLATFORMS='cpu', TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=REPO)
  result = subprocess.run(
      [sys.executable, '-m', 'sharedbert.lab.recipe_ablation', f'--workdir={tmp_path / "w"}',
       f'--out={out}', '--seconds=2', '--calibration_steps=3', '--evals=2',
       f'--corpus={corpus}', '--arms=bert,budget without mask 40%'],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  report = json.loads((out / 'ablation.json').read_text())
  arms = {a['arm']: a for a in report['arms']}
  assert list(arms) == ['bert', 'budget without mask 40%']
  # Each arm's steps are the budget over its calibrated step time, and it trained them all.
  for a in arms.values():
    assert a['steps'] == max(int(2 / a['calibrated_step_time']), 10)
    assert a['curve'][-1][0] == a['steps'] and 0 <= a['eval_mlm_accuracy'] <= 1
  # The arm keeps the budget's keys except the left-out group, resolved for this preset.
  kept = arms['budget without mask 40%']['overrides']
  assert 'data.mask_rate' not in kept and kept['model.pre_layer_norm'] is True
  assert kept['model.initializer_range'] == round(0.7 / 128 ** 0.5, 4)
  assert arms['bert']['overrides'] == {}
  assert (out / 'learning_curves.png').stat().st_size > 0
  assert '| budget without mask 40% |' in (out / 'recipe.md').read_text()
  # The load of the sitting is kept in the workdir; a regenerated report reads it from there.
  load_file = tmp_path / 'w' / 'load_before.txt'
  assert load_file.read_text() == report['load_average_before']
  load_file.write_text('9.99, 9.99, 9.99')
  # A second run trains nothing again: each finished arm is read back.
  again = subprocess.run(result.args, cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=600)
  assert again.returncode == 0 and 'Starting a new run' not in again.stderr
  again_report = json.loads((out / 'ablation.json').read_text())
  assert again_report['load_average_before'] == '9.99, 9.99, 9.99'
  assert 'load average before: 9.99, 9.99, 9.99' in (out / 'recipe.md').read_text()
