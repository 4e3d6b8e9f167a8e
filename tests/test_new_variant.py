"""Adding an attention variant is one class and one config file (docs/variants.md, "Adding
a variant").

`TiedKVAttention` below (K = V from one projection; an example, not a published variant) is
registered only inside these tests; it goes through the parameter report, the FLOP counter,
a forward pass, the resume check and training steps with nothing else changed.
"""

import copy
import dataclasses
import textwrap

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sharedbert.models import flops
from sharedbert.models import params as params_lib
from sharedbert import pretrain_step
from sharedbert import train
from sharedbert import optim as optim_lib
from sharedbert.models import attention as attention_lib
from sharedbert.models.bert import BertForPretraining, ModelConfig
from test_flops import _dot_flops
from test_model import make_inputs


class TiedKVAttention(attention_lib.AttentionBase):
  """K = V = xW_k + b_k; Q its own."""

  def qkv(self, x, **kwargs):
    k = self.projection('key')(x)
    return self.projection('query')(x), k, k

  @classmethod
  def param_formula(cls, config):  # (attention QKV, attention output) of the whole stack.
    dense = config.hidden_size * (config.hidden_size + 1)
    return config.num_layers * 2 * dense, config.num_layers * dense

  @classmethod
  def qkv_flops(cls, config):  # Two [tokens, D] x [D, D] products per layer.
    return [config.hidden_size] * 2, 0


CONFIG_FILE = '''
from sharedbert import config as sb_config


def get_config(arg=None):
  return sb_config.pretrain_config('tied_kv', arg)
'''

SMALL = dict(vocab_size=97, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
             max_position_embeddings=16, dropout_rate=0.0, attention_dropout_rate=0.0)
INPUTS = make_inputs()


@pytest.fixture
def tied_kv(tmp_path):
  """The variant registered, and the path of its config file."""
  attention_lib.register('tied_kv')(TiedKVAttention)
  path = tmp_path / 'tied_kv_base.py'
  path.write_text(textwrap.dedent(CONFIG_FILE))
  yield str(path)
  del attention_lib.VARIANTS['tied_kv']


def model_config(path):
  config = params_lib.load_config_file(path, 'tiny')
  config.model.update(SMALL)
  return ModelConfig.from_config(config.model), config


def test_report_counts_and_checks_the_closed_form(tied_kv):
  cfg, _ = model_config(tied_kv)
  assert cfg.attention == 'tied_kv'
  text = params_lib.report(cfg)
  assert 'closed form' in text and 'tied_kv' in text
  counts = params_lib.parameter_counts(cfg)
  standard = params_lib.parameter_counts(ModelConfig(attention='standard', **SMALL))
  assert counts['attention QKV'] * 3 == standard['attention QKV'] * 2
  assert counts['attention output'] == standard['attention output']

  # A wrong formula is caught by the report, not printed.
  class Wrong(TiedKVAttention):
    @classmethod
    def param_formula(cls, config):
      return 1, 2
  attention_lib.VARIANTS['tied_kv'] = Wrong
  with pytest.raises(ValueError, match='param_formula'):
    params_lib.report(cfg)
  attention_lib.VARIANTS['tied_kv'] = TiedKVAttention


def test_flops_match_the_traced_products(tied_kv):
  cfg, _ = model_config(tied_kv)
  b, t, p = 3, 8, 2
  batch = {'input_ids': jnp.ones((b, t), jnp.int32), 'segment_ids': jnp.zeros((b, t), jnp.int32),
           'input_mask': jnp.ones((b, t), jnp.int32),
           'masked_positions': jnp.zeros((b, p), jnp.int32),
           'masked_ids': jnp.zeros((b, p), jnp.int32), 'masked_weights': jnp.ones((b, p))}
  model = BertForPretraining(cfg)
  params = nn.unbox(jax.eval_shape(lambda: model.init(
      jax.random.key(0), *(batch[k] for k in ('input_ids', 'segment_ids', 'input_mask',
                                              'masked_positions'))))['params'])
  loss = lambda prm: pretrain_step.mlm_loss(model, prm, batch, None, True)[0]
  pooler = flops.matmul(b, cfg.hidden_size, cfg.hidden_size)
  traced = _dot_flops(jax.make_jaxpr(loss)(params).jaxpr) - pooler
  assert traced == sum(flops.forward_flops(cfg, b, t, mlm_rows=b * p).values())


def test_forward_is_standard_with_the_value_projection_tied_to_the_key(tied_kv):
  cfg, _ = model_config(tied_kv)
  params = nn.unbox(BertForPretraining(cfg).init(jax.random.key(0), *INPUTS)['params'])
  standard = copy.deepcopy(jax.tree.map(np.asarray, params))
  for i in range(cfg.num_layers):
    attention = standard['bert'][f'layer_{i}']['attention']
    attention['value'] = copy.deepcopy(attention['key'])
  out = BertForPretraining(cfg).apply({'params': params}, *INPUTS)
  ref = BertForPretraining(dataclasses.replace(cfg, attention='standard')).apply(
      {'params': standard}, *INPUTS)
  np.testing.assert_allclose(out['mlm_logits'], ref['mlm_logits'], atol=2e-5, rtol=0)


def test_trains_and_resumes_under_its_own_config(tied_kv):
  cfg, config = model_config(tied_kv)
  train._check_compatible({'model': cfg.to_dict()}, cfg, 'W')  # Its own checkpoints resume.
  model = BertForPretraining(cfg)
  tx, schedule = optim_lib.make_optimizer(config.optim, 10)
  params = nn.unbox(pretrain_step.init_params(model, jax.random.key(0)))
  zero = jnp.zeros((), jnp.int32)
  state = pretrain_step.TrainState(step=zero, params=params, opt_state=tx.init(params), skipped=zero,
                           skipped_total=zero)
  ids, segments, mask, positions = INPUTS
  batch = {'input_ids': ids, 'segment_ids': segments, 'input_mask': mask,
           'masked_positions': positions,
           'masked_ids': np.take_along_axis(ids, positions, 1),
           'masked_weights': np.ones(positions.shape, np.float32)}
  step = jax.jit(lambda s, b: pretrain_step.train_step(s, b, model=model, tx=tx, schedule=schedule,
                                               base_rng=jax.random.key(1), accum_steps=1))
  new, metrics = step(state, batch)
  assert np.isfinite(float(metrics['loss'])) and int(new.skipped_total) == 0
  key = new.params['bert']['layer_0']['attention']['key']['kernel']
  assert not np.allclose(key, params['bert']['layer_0']['attention']['key']['kernel'])
  assert 'value' not in new.params['bert']['layer_0']['attention']
