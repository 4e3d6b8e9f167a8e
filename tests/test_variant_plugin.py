"""A new attention variant with a setting of its own, added from this file alone (issue 55):
no file of the package is edited. It trains, its parameters are counted against its closed
form, a resume must match its setting, and it exports to transformers' BERT layout, which
imports back to the same function."""

import dataclasses

import jax
import numpy as np
import pytest

import sharedbert
from sharedbert import config as config_lib
from sharedbert import train as train_lib
from sharedbert.convert import hf as convert_hf
from sharedbert.errors import UserError
from sharedbert.models import attention
from sharedbert.models import params as params_lib
from sharedbert.models.bert import ModelConfig

from test_sharding import TINY_MODEL, write_corpus


class TemperedAttention(attention.StandardAttention):
  """standard attention whose scores are divided by a fixed temperature: a setting of its
  own, with no parameter, so that it exports as standard with W_q and b_q divided by it."""
  settings = {'temperature': 1.0}

  @classmethod
  def check_config(cls, config):
    if not config.temperature > 0:
      raise UserError(f'model.temperature must be positive, not {config.temperature}')

  def qkv(self, x, **kwargs):
    q, k, v = super().qkv(x, **kwargs)
    return q / self.config.temperature, k, v

  @classmethod
  def export_as(cls, config, params):
    t = config.temperature
    params = jax.tree_util.tree_map_with_path(
        lambda path, x: x / t if '/attention/query/' in '/' + '/'.join(
            str(getattr(k, 'key', k)) for k in path) + '/' else x, params)
    return dataclasses.replace(config, attention='standard', variant_settings=()), params


@pytest.fixture
def tempered():
  """The variant registered for one test (collected parametrizations over VARIANTS, in
  other test files, never see it)."""
  attention.register('tempered')(TemperedAttention)
  yield TemperedAttention
  del attention.VARIANTS['tempered']


def _config(corpus, temperature):
  config = config_lib.pretrain_config('standard', 'tiny,recipe=bert')
  config.model.update(TINY_MODEL)
  config.model.attention = 'tempered'
  config.model.temperature = temperature
  config.data.update(corpus=str(corpus), seq_len=32, batch_size=16, max_predictions=5,
                     eval_fraction=0.1)
  config.total_steps = 3
  config.eval_every_steps = 3
  config.eval_batches = 1
  config.ckpt.every_steps = 3
  config.log_every_steps = 1
  return config


def test_the_settings_are_the_variants_own(tempered):
  cfg = ModelConfig.from_config({'attention': 'tempered', 'temperature': 0.5})
  assert cfg.temperature == 0.5 and cfg.to_dict()['temperature'] == 0.5
  assert 'variant_settings' not in cfg.to_dict()
  assert ModelConfig.from_config(cfg.to_dict()) == cfg  # As a checkpoint's meta reads back.
  assert ModelConfig.from_config({'attention': 'tempered'}).temperature == 1.0  # Its default.
  with pytest.raises(UserError, match='temperature must be positive'):
    ModelConfig.from_config({'attention': 'tempered', 'temperature': 0.0})
  with pytest.raises(UserError, match="unknown model config keys: \\['temperature'\\]"):
    ModelConfig.from_config({'attention': 'standard', 'temperature': 0.5})
  with pytest.raises(AttributeError, match='no field or standard setting'):
    ModelConfig().temperature  # pylint: disable=expression-not-assigned


def test_a_plugged_in_variant_trains_counts_resumes_and_exports(tempered, tmp_path):
  corpus = tmp_path / 'corpus.txt'
  write_corpus(corpus)
  workdir = str(tmp_path / 'run')
  config = _config(corpus, 0.05)  # Scores x20: a temperature that shows at init scale.
  summary = train_lib.train_and_evaluate(config, workdir)
  assert np.isfinite(summary['eval_loss'])
  # Its parameters: standard's tree, checked against the closed form it inherits.
  model_cfg = ModelConfig.from_config(config.model)
  counts = params_lib.parameter_counts(model_cfg)
  assert params_lib.check_formula(model_cfg, counts)
  d = TINY_MODEL['hidden_size']
  assert counts['attention QKV'] == 3 * d * (d + 1) * TINY_MODEL['num_layers']
  # The setting changes the function, so a resume must match it.
  with pytest.raises(UserError, match='temperature: checkpoint 0.05 vs config 2.0'):
    train_lib.train_and_evaluate(_config(corpus, 2.0), workdir)
  # Exported as BERT (the temperature folded into W_q), imported back: the same logits.
  hf_dir = str(tmp_path / 'hf')
  notes = convert_hf.export_hf(workdir, hf_dir)
  assert 'BertForMaskedLM layout' in notes[0]
  imported = str(tmp_path / 'imported')
  convert_hf.import_hf(hf_dir, imported)
  run = sharedbert.restore(workdir, devices=jax.devices()[:1])
  back = sharedbert.restore(imported, devices=jax.devices()[:1])
  assert run.config.model.attention == 'tempered' and back.config.model.attention == 'standard'
  texts = ['the cat sat on a mat', 'seven dogs ran past the old red barn']
  a, b = run.encode(texts), back.encode(texts)
  np.testing.assert_allclose(a['sequence_output'], b['sequence_output'], atol=2e-5)
  # Not the identity: the temperature does change the function.
  plain = dataclasses.replace(run, model=type(run.model)(dataclasses.replace(
      run.model.config, attention='standard', variant_settings=())))
  assert np.abs(plain.encode(texts)['sequence_output'] - a['sequence_output']).max() > 1e-3
