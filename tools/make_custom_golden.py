r"""Regenerates tests/fixtures/hf_custom: one tiny random model per attention variant
exported as custom code, run by real transformers, and the outputs it gave.

  python tools/make_custom_golden.py --hf_python=/path/to/python-with-torch \
      [--out=tests/fixtures/hf_custom]

Runs with sharedbert's Python (JAX) and calls --hf_python (torch and transformers) on each
exported folder. For every case it writes CASE.npz: the inputs (input_ids with a padded row,
attention_mask, token_type_ids), the weights as exported (`w:<name>`), and what transformers
computed (`logits`: MLM logits at every position, or the classifier's); and
manifest.json: the config of each case, the code files' sha256 (hf_custom.code_digest: the
test fails if modeling_sharedbert.py changes without new goldens), the versions, and the
largest |transformers - sharedbert| per case, the number of hidden states
output_hidden_states gave (L+1), the names of masa's atom tensors as transformers holds them
(one per projection type, not one per layer), and the difference after save_pretrained and
from_pretrained again. Exits 1 if any case differs from sharedbert by more than 1e-4.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import jax
import numpy as np

from sharedbert.convert import hf_custom
from sharedbert.convert import hf_layout
from sharedbert.models import attention as attention_lib
from sharedbert.models.bert import BertForPretraining, BertForSequenceClassification, ModelConfig

REPO = pathlib.Path(__file__).resolve().parents[1]
TOLERANCE = 1e-4
BASE = ModelConfig(vocab_size=61, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=24,
                   max_position_embeddings=24, dropout_rate=0.0, attention_dropout_rate=0.0)
# Variant settings of the cases, each taken by the variants that declare it.
SETTINGS = {'masa_atoms': 2, 'qk_shared_fraction': 0.5}


def model(attention: str = 'standard', **changes) -> ModelConfig:
  """BASE as `attention`, with SETTINGS where that variant has them."""
  own = {k: v for k, v in SETTINGS.items() if k in attention_lib.VARIANTS[attention].settings}
  return BASE.replace(attention=attention, **own, **changes)


def cases() -> dict[str, tuple[ModelConfig, dict | None]]:
  """name -> (model config, classifier head or None): every variant (post- and pre-LN in
  turn), a causal and a position-free model, and two classifiers."""
  out = {}
  for i, variant in enumerate(hf_custom.EXPORTABLE):
    out[variant] = (model(variant, pre_layer_norm=bool(i % 2),
                          num_layers=3 if variant == 'masa' else 2), None)
  # Every variant with rotary positions (issue 53), two of them with a query phase and one
  # with another base, in the other LayerNorm placement than its learned-table case.
  for i, variant in enumerate(hf_custom.EXPORTABLE):
    rotary = dict(position_embeddings='rotary', pre_layer_norm=not bool(i % 2),
                  rope_query_phase=0.5 if variant in ('shared', 'symmetric') else 0.0,
                  rope_theta=100.0 if variant == 'pairwise' else 10000.0)
    out[f'{variant}_rotary'] = (model(variant, num_layers=3 if variant == 'masa' else 2,
                                      **rotary), None)
  out['shared_causal'] = (model('shared', causal=True), None)
  out['standard_no_positions'] = (model(position_embeddings='none'), None)
  head = {'num_labels': 3, 'labels': ['a', 'b', 'c'], 'is_regression': False, 'task': 'toy'}
  out['shared_classifier'] = (model('shared'), head)
  out['masa_classifier_mean'] = (model('masa', num_layers=3),
                                 {**head, 'pooling': 'mean'})
  return out


def perturbed(tree, seed: int):
  """Every parameter moved at random (biases and LayerNorm scales too), so that a misplaced
  or transposed tensor shows."""
  leaves, treedef = jax.tree.flatten(tree)
  rng = np.random.default_rng(seed)
  return jax.tree.unflatten(treedef, [np.asarray(x, np.float32) + rng.normal(
      0, 0.05, np.shape(x)).astype(np.float32) for x in leaves])


def inputs(seed: int) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, BASE.vocab_size, (3, 11)).astype(np.int32)
  ids[:, 0] = 2  # [CLS]
  mask = np.ones_like(ids)
  ids[1, 6:], mask[1, 6:] = 0, 0  # Rows of 11, 6 and 9 real tokens.
  ids[2, 9:], mask[2, 9:] = 0, 0
  segments = np.zeros_like(ids)
  segments[2, 5:] = 1
  return {'input_ids': ids, 'attention_mask': mask, 'token_type_ids': segments}


def ours(cfg: ModelConfig, head, params, x) -> tuple[np.ndarray, list[np.ndarray]]:
  """sharedbert's logits on the same inputs (MLM: at every position), and each layer's
  attention probabilities [B, N, T, S] (the softmax of its sown scores)."""
  if head is None:
    positions = np.tile(np.arange(x['input_ids'].shape[1]), (len(x['input_ids']), 1))
    out, state = BertForPretraining(cfg).apply(
        {'params': params}, x['input_ids'], x['token_type_ids'], x['attention_mask'],
        positions, mutable=['attention_logits'])
    logits = out['mlm_logits']
  else:
    model = BertForSequenceClassification(cfg, num_labels=head['num_labels'],
                                          pooling=head.get('pooling', 'cls'))
    logits, state = model.apply({'params': params}, x['input_ids'], x['token_type_ids'],
                                x['attention_mask'], mutable=['attention_logits'])
  layers = sorted(jax.tree_util.tree_leaves_with_path(state['attention_logits']),
                  key=lambda kv: int(jax.tree_util.keystr(kv[0]).split('layer_')[1][0]))
  return np.asarray(logits), [np.asarray(jax.nn.softmax(v, axis=-1)) for _, v in layers]


def log_probs(logits: np.ndarray) -> np.ndarray:
  z = logits.astype(np.float64)
  z = z - z.max(-1, keepdims=True)
  return z - np.log(np.exp(z).sum(-1, keepdims=True))


TORCH_SIDE = r'''
import json, sys, tempfile
import numpy as np, torch, transformers
folder, npz = sys.argv[1], sys.argv[2]
x = dict(np.load(npz))
config = transformers.AutoConfig.from_pretrained(folder, trust_remote_code=True)
auto = (transformers.AutoModelForSequenceClassification
        if config.architectures[0].endswith('SequenceClassification')
        else transformers.AutoModelForMaskedLM)
model = auto.from_pretrained(folder, trust_remote_code=True).eval()
feed = {k: torch.from_numpy(x[k].astype(np.int64))
        for k in ('input_ids', 'attention_mask', 'token_type_ids')}
with torch.no_grad():
  out = model(**feed, output_hidden_states=True, output_attentions=True)
logits = out.logits.numpy()
hidden = [h.numpy() for h in out.hidden_states]
assert len(hidden) == config.num_hidden_layers + 1, len(hidden)
attentions = [a.numpy() for a in out.attentions]
with tempfile.TemporaryDirectory() as saved:
  model.save_pretrained(saved)
  again = auto.from_pretrained(saved, trust_remote_code=True).eval()
  with torch.no_grad():
    resaved = float(np.max(np.abs(again(**feed).logits.numpy() - logits)))
# What else BertModel / BertForMaskedLM / BertForSequenceClassification answer (issue 56).
import logging as py_logging
api = {}
seen = []
class Catch(py_logging.Handler):
  def emit(self, record):
    seen.append(record.getMessage())
py_logging.getLogger('transformers').addHandler(Catch())
table = model.get_input_embeddings()
api['input_embeddings'] = list(table.weight.shape) == [config.vocab_size, config.hidden_size]
with torch.no_grad():  # A padded row (its last id is [PAD] = 0) without attention_mask.
  model(input_ids=feed['input_ids'], token_type_ids=feed['token_type_ids'])
api['warns_without_attention_mask'] = any('attention_mask' in m for m in seen)
def grads():
  model.zero_grad()
  model(**feed).logits.float().square().mean().backward()
  return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
model.train()
plain = grads()
model.gradient_checkpointing_enable()
# Recomputed in the backward pass: the layers' forward runs twice per step.
calls = []
hook = model.base_model.layer_0.register_forward_pre_hook(lambda *a: calls.append(1))
checkpointed = grads()
hook.remove()
api['layer_forward_calls_with_checkpointing'] = len(calls)
model.gradient_checkpointing_disable()
model.eval()
api['gradient_checkpointing_max_grad_difference'] = max(
    float((plain[n] - checkpointed[n]).abs().max()) for n in plain)
rows = config.vocab_size
model.resize_token_embeddings(rows + 5)
with torch.no_grad():
  grown = model(**feed).logits.numpy()
if grown.shape[-1] == rows + 5:  # A masked-LM: the old tokens' logits are unchanged.
  grown = grown[..., :rows]
api['resize_token_embeddings_max_difference'] = float(np.max(np.abs(grown - logits)))
api['resized_rows'] = int(model.get_input_embeddings().weight.shape[0])
np.savez(npz + '.out.npz', logits=logits,
         **{f'attention_{i}': a for i, a in enumerate(attentions)})
atoms = [n for n, _ in model.named_parameters() if n.endswith('.atoms')]
print('JSON' + json.dumps({'resaved': resaved, 'atoms': atoms, 'hidden_states': len(hidden),
                           'api': api,
                           'versions': [transformers.__version__, torch.__version__]}))
'''


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--hf_python', required=True, help='a Python with torch and transformers')
  parser.add_argument('--out', default=str(REPO / 'tests' / 'fixtures' / 'hf_custom'))
  args = parser.parse_args()
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  manifest = {'code_digest': hf_custom.code_digest(), 'tolerance': TOLERANCE, 'cases': {}}
  failed = False
  for seed, (name, (cfg, head)) in enumerate(cases().items()):
    params = perturbed(hf_layout.init_params(cfg, seed), seed)
    if head is not None:
      params = {'bert': params['bert'], 'classifier': {
          'kernel': np.random.default_rng(seed).normal(0, 0.3, (cfg.hidden_size, 3)).astype(
              np.float32), 'bias': np.asarray([0.1, -0.2, 0.05], np.float32)}}
    x = inputs(seed)
    with tempfile.TemporaryDirectory() as folder:
      encoder = {k: v for k, v in params.items() if k != 'classifier'}
      hf_custom.write_dir(folder, cfg, encoder, head=head,
                          head_params=params.get('classifier'), card='')
      npz = os.path.join(folder, 'inputs.npz')
      np.savez(npz, **x)
      done = subprocess.run([args.hf_python, '-c', TORCH_SIDE, folder, npz],
                            capture_output=True, text=True)
      if done.returncode:
        sys.exit(f'{name}: transformers failed:\n{done.stderr[-4000:]}')
      report = json.loads(next(l for l in done.stdout.splitlines() if l.startswith('JSON'))[4:])
      theirs = dict(np.load(npz + '.out.npz'))
      config = json.loads(pathlib.Path(folder, 'config.json').read_text())
    logits, attentions = ours(cfg, head, params, x)
    diff = float(np.max(np.abs(theirs['logits'] - logits)))
    real = x['attention_mask'].astype(bool) if head is None else slice(None)
    log_prob_diff = float(np.max(np.abs(log_probs(theirs['logits'])[real]
                                        - log_probs(logits)[real])))
    attention_diff = max(float(np.max(np.abs(theirs[f'attention_{i}'] - a)))
                         for i, a in enumerate(attentions))
    api = report['api']
    failed |= (max(diff, log_prob_diff, attention_diff) > TOLERANCE or report['resaved'] > 0
               or len(attentions) != cfg.num_layers or not api['input_embeddings']
               or not api['warns_without_attention_mask']
               or api['gradient_checkpointing_max_grad_difference'] > TOLERANCE
               or api['resize_token_embeddings_max_difference'] > TOLERANCE
               or api['resized_rows'] != cfg.vocab_size + 5
               or api['layer_forward_calls_with_checkpointing'] != 2)
    weights = {f'w:{k}': v for k, v in hf_custom.tensors_from_params(params).items()}
    np.savez_compressed(out / f'{name}.npz', **x, **theirs, **weights)
    manifest['cases'][name] = {'config': config, 'max_abs_logit_difference': diff,
                               'max_abs_log_prob_difference': log_prob_diff,
                               'max_abs_attention_difference': attention_diff,
                               'attention_layers': len(attentions),
                               'api': report['api'],
                               'resaved_difference': report['resaved'],
                               'hidden_states': report['hidden_states'],
                               'atom_tensors': report['atoms']}
    manifest['versions'] = {'transformers': report['versions'][0],
                            'torch': report['versions'][1]}
    print(f'{name:24s} max |transformers - sharedbert|: logits {diff:.2e}, log-probs '
          f'{log_prob_diff:.2e}, attention {attention_diff:.2e}; after save_pretrained and '
          f'reload: {report["resaved"]:.1e}; API {api}', flush=True)
  (out / 'manifest.json').write_text(json.dumps(manifest, indent=2, sort_keys=True) + '\n')
  sys.exit(1 if failed else 0)


if __name__ == '__main__':
  main()
