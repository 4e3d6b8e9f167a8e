r"""Regenerates tests/fixtures/hf_bert_tiny: a small random Hugging Face BERT and its outputs
(and, with --arch=roberta-prelayernorm, tests/fixtures/hf_prelayernorm_tiny: the same for
RobertaPreLayerNormForMaskedLM, the pre-LN layout; [PAD] = 0, so its position table has one
row in front of sharedbert's).

Needs torch and transformers (not sharedbert's dependencies; the tests only read the files
written here):

  python tools/make_hf_golden.py [--out=tests/fixtures/hf_bert_tiny]
  python tools/make_hf_golden.py --arch=roberta-prelayernorm \
      --out=tests/fixtures/hf_prelayernorm_tiny
  python tools/make_hf_golden.py --arch=roformer --out=tests/fixtures/hf_roformer_tiny

(RoFormerForMaskedLM: rotary positions, no position table and no pooler, so its golden.npz
has no pooler entries.)

Writes, into --out:
  config.json, model.safetensors  what `BertForMaskedLM.save_pretrained` writes (no pooler:
                                  the masked-LM model has none)
  vocab.txt, tokenizer_config.json  a 99-token lower-case WordPiece vocabulary (written by
                                  `BertTokenizer.save_pretrained`), its special tokens at
                                  BERT-like ids that are not sentencepiece's 0-4
  golden.npz                      the inputs (input_ids, attention_mask, token_type_ids, one
                                  row padded), the MLM logits at every position, every hidden
                                  state [L+1, B, T, D], and a pooler (pooler_weight in torch's
                                  [out, in] layout, pooler_bias) with the pooled output that
                                  `BertModel` computes from the same encoder

All parameters are random and non-trivial (biases and LayerNorm scales are perturbed too),
so that a transposed or misplaced tensor shows. Attention is the eager implementation.

  python tools/make_hf_golden.py --verify=DIR

loads an exported directory (`python -m sharedbert.convert.hf export ...`) with
transformers and checks that it reproduces golden.npz to 1e-5.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
import transformers

DEFAULT_OUT = os.path.join(os.path.dirname(__file__), '..', 'tests', 'fixtures', 'hf_bert_tiny')

CONFIG = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=37, max_position_embeddings=16, type_vocab_size=2,
              hidden_act='gelu', layer_norm_eps=1e-12, initializer_range=0.2,
              hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


# 99 tokens: [PAD] 0, two unused, [UNK] 3, [CLS] 4, [SEP] 5, [MASK] 6, then words and pieces.
VOCAB = (['[PAD]', '[unused0]', '[unused1]', '[UNK]', '[CLS]', '[SEP]', '[MASK]',
          '.', ',', '!', '?', "'", '-']
         + ('the a an of to and in is on it that was he she they we you i cat dog sat mat ran '
            'house tree river city king queen man woman day night good bad big small red blue '
            'green old new first last time year world music book play read walk talk sing '
            'paris france capital country').split()
         + ['##s', '##ed', '##ing', '##er', '##ly', '##y', '##e', '##n', '##t', '##a', '##o',
            'b', 'c', 'd', 'e', 'f', 'g', 'h', 'k', 'l', 'm', 'n', 'o', 'p', 'r', 's', 't', 'u'])
assert len(VOCAB) == CONFIG['vocab_size']


def write_tokenizer(out_dir: str):
  with open(os.path.join(out_dir, 'vocab.txt'), 'w', encoding='utf-8') as f:
    f.write(''.join(t + '\n' for t in VOCAB))
  tokenizer = transformers.BertTokenizer(os.path.join(out_dir, 'vocab.txt'), do_lower_case=True)
  tokenizer.save_pretrained(out_dir)


def golden_inputs():
  rng = np.random.default_rng(0)
  input_ids = rng.integers(1, CONFIG['vocab_size'], (2, 7)).astype(np.int64)
  attention_mask = np.ones((2, 7), np.int64)
  attention_mask[1, 4:] = 0  # The second row is padded.
  input_ids[1, 4:] = 0
  token_type_ids = np.array([[0, 0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 0, 0, 0]], np.int64)
  return input_ids, attention_mask, token_type_ids


def run(model, inputs):
  input_ids, attention_mask, token_type_ids = (torch.from_numpy(x) for x in inputs)
  with torch.no_grad():
    out = model(input_ids=input_ids, attention_mask=attention_mask,
                token_type_ids=token_type_ids, output_hidden_states=True)
  return (out.logits.numpy().astype(np.float32),
          np.stack([h.numpy() for h in out.hidden_states]).astype(np.float32))


ARCHS = {
    # model_type: (config class, MLM model, base model, config changes)
    'bert': ('BertConfig', 'BertForMaskedLM', 'BertModel', {}),
    'roberta-prelayernorm': ('RobertaPreLayerNormConfig', 'RobertaPreLayerNormForMaskedLM',
                             'RobertaPreLayerNormModel',
                             dict(pad_token_id=0, bos_token_id=4, eos_token_id=5,
                                  max_position_embeddings=CONFIG['max_position_embeddings'] + 1)),
    'roformer': ('RoFormerConfig', 'RoFormerForMaskedLM', None,
                 dict(embedding_size=CONFIG['hidden_size'], rotary_value=False)),
}


def generate(out_dir: str, arch: str = 'bert'):
  torch.manual_seed(0)
  config_cls, mlm_cls, base_cls, changes = ARCHS[arch]
  config = getattr(transformers, config_cls)(**{**CONFIG, **changes})
  model = getattr(transformers, mlm_cls)._from_config(config, attn_implementation='eager').eval()
  assert model.config._attn_implementation == 'eager'
  with torch.no_grad():
    for name, p in model.named_parameters():
      # Zero biases and unit LayerNorm scales would hide a misplaced tensor.
      if name.endswith('bias'):
        p.copy_(0.1 * torch.randn_like(p))
      elif 'LayerNorm.weight' in name or 'layer_norm.weight' in name:
        p.copy_(1.0 + 0.1 * torch.randn_like(p))
  inputs = golden_inputs()
  logits, hidden = run(model, inputs)

  os.makedirs(out_dir, exist_ok=True)
  if base_cls is None:  # RoFormer: no pooler.
    model.save_pretrained(out_dir)
    write_tokenizer(out_dir)
    np.savez_compressed(
        os.path.join(out_dir, 'golden.npz'), input_ids=inputs[0].astype(np.int32),
        attention_mask=inputs[1].astype(np.int32), token_type_ids=inputs[2].astype(np.int32),
        logits=logits, hidden_states=hidden)
    print(f'transformers {transformers.__version__}, torch {torch.__version__}')
    return
  # A pooler on the same encoder, for importing a checkpoint that has one.
  base = getattr(transformers, base_cls)._from_config(config, add_pooling_layer=True,
                                                      attn_implementation='eager').eval()
  missing, unexpected = base.load_state_dict(model.base_model.state_dict(), strict=False)
  assert set(missing) <= {'pooler.dense.weight', 'pooler.dense.bias'}, missing
  assert not unexpected, unexpected
  with torch.no_grad():
    base.pooler.dense.weight.copy_(0.2 * torch.randn_like(base.pooler.dense.weight))
    base.pooler.dense.bias.copy_(0.1 * torch.randn_like(base.pooler.dense.bias))
    pooled = base(input_ids=torch.from_numpy(inputs[0]),
                  attention_mask=torch.from_numpy(inputs[1]),
                  token_type_ids=torch.from_numpy(inputs[2])).pooler_output.numpy()

  os.makedirs(out_dir, exist_ok=True)
  model.save_pretrained(out_dir)
  write_tokenizer(out_dir)
  np.savez_compressed(
      os.path.join(out_dir, 'golden.npz'), input_ids=inputs[0].astype(np.int32),
      attention_mask=inputs[1].astype(np.int32), token_type_ids=inputs[2].astype(np.int32),
      logits=logits, hidden_states=hidden,
      pooler_weight=base.pooler.dense.weight.detach().numpy(),
      pooler_bias=base.pooler.dense.bias.detach().numpy(), pooled_output=pooled)
  for name in sorted(os.listdir(out_dir)):
    print(f'{name}: {os.path.getsize(os.path.join(out_dir, name)):,} bytes')
  print(f'transformers {transformers.__version__}, torch {torch.__version__}')


def verify(exported_dir: str, golden_dir: str):
  golden = np.load(os.path.join(golden_dir, 'golden.npz'))
  model = transformers.AutoModelForMaskedLM.from_pretrained(exported_dir,
                                                            attn_implementation='eager').eval()
  inputs = tuple(golden[k].astype(np.int64)
                 for k in ('input_ids', 'attention_mask', 'token_type_ids'))
  logits, hidden = run(model, inputs)
  # At real tokens: RoBERTa gives padding its own position row, which an export zeroes.
  real = golden['attention_mask'].astype(bool)
  err_logits = float(np.max(np.abs(logits - golden['logits'])[real]))
  err_hidden = float(np.max(np.abs(hidden - golden['hidden_states'])[:, real]))
  print(f'max |logits - golden| = {err_logits:.2e}; max |hidden states - golden| = '
        f'{err_hidden:.2e}')
  if max(err_logits, err_hidden) > 1e-5:
    raise SystemExit('the exported checkpoint does not reproduce the golden outputs')
  print('OK: transformers loads the export and reproduces the golden outputs to 1e-5')


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--out', default=DEFAULT_OUT, help='fixture directory')
  parser.add_argument('--verify', default='', help='an exported HF directory to check')
  parser.add_argument('--arch', default='bert', choices=sorted(ARCHS), help='model_type')
  args = parser.parse_args()
  if args.verify:
    verify(args.verify, args.out)
  else:
    generate(args.out, args.arch)


if __name__ == '__main__':
  main()
