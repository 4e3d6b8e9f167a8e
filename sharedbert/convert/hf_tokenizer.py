"""The tokenizer beside a Hugging Face folder: what the exporter writes (files AutoTokenizer
loads with no custom code, giving sharedbert's ids) and what the importer reads (a BERT
WordPiece vocab.txt, or the vocab.model of sharedbert's own export)."""

from __future__ import annotations

import json
import os

from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.errors import UserError
from sharedbert.models.bert import ModelConfig


def write_hf_tokenizer(hf_dir: str, tokenizer, model_max_length: int) -> list[str]:
  """The tokenizer files AutoTokenizer loads with no custom code, giving sharedbert's ids.

  tokenizer.json (the `tokenizers` pipeline: WordPiece, or a Unigram rebuilt from the
  sentencepiece model) and tokenizer_config.json, plus the vocabulary file itself.
  Returns the names written.

  Args:
    hf_dir: the folder.
    tokenizer: sharedbert's tokenizer.
    model_max_length: the longest input.
  Returns:
    The file names written.
  """
  hf_tok = tokenizer.to_hf_tokenizer()
  hf_tok.save(os.path.join(hf_dir, 'tokenizer.json'))
  special = tokenizer.special_tokens()
  if tokenizer.kind == 'wordpiece':
    config = tokenizer.config()
    tokenizer.save(hf_dir)  # vocab.txt (and the config, rewritten below).
    names = ['tokenizer.json', 'tokenizer_config.json', 'vocab.txt']
  else:
    config = {'tokenizer_class': 'PreTrainedTokenizerFast'}
    tokenizer_lib.save(tokenizer, os.path.join(hf_dir, tokenizer_lib.VOCAB_FILE))
    names = ['tokenizer.json', 'tokenizer_config.json', 'vocab.model']
  config.update({f'{n}_token': special[n] for n in tokenizer_lib.SPECIAL_NAMES})
  config.update(model_max_length=int(model_max_length), clean_up_tokenization_spaces=False,
                model_input_names=['input_ids', 'token_type_ids', 'attention_mask'])
  with open(os.path.join(hf_dir, 'tokenizer_config.json'), 'w', encoding='utf-8') as f:
    json.dump(config, f, indent=2, sort_keys=True)
    f.write('\n')
  with open(os.path.join(hf_dir, 'special_tokens_map.json'), 'w', encoding='utf-8') as f:
    json.dump({f'{n}_token': special[n] for n in tokenizer_lib.SPECIAL_NAMES}, f, indent=2)
    f.write('\n')
  return names + ['special_tokens_map.json']


def read_hf_tokenizer(hf_dir: str, model_cfg: ModelConfig):
  """The WordPiece vocabulary of a Hugging Face BERT directory, or the sentencepiece
  vocabulary (vocab.model) that sharedbert's own export writes, checked against the model.

  Args:
    hf_dir: the folder.
    model_cfg: the model it must fit.
  Returns:
    The tokenizer.
  """
  if (not os.path.isfile(os.path.join(hf_dir, tokenizer_lib.WORDPIECE_FILE))
      and os.path.isfile(os.path.join(hf_dir, tokenizer_lib.VOCAB_FILE))):
    tokenizer = tokenizer_lib.load_workdir(hf_dir)  # sharedbert's export read back.
  elif not os.path.isfile(os.path.join(hf_dir, tokenizer_lib.WORDPIECE_FILE)):
    others = [n for n in ('tokenizer.json', 'spiece.model', 'sentencepiece.bpe.model',
                          'vocab.json', 'vocab.model') if os.path.isfile(os.path.join(hf_dir, n))]
    if others:
      raise UserError(f'{hf_dir} has no vocab.txt (it has {", ".join(others)}); sharedbert '
                      'imports BERT WordPiece vocabularies only: save the tokenizer of a '
                      'BertTokenizer there (tokenizer.save_pretrained(dir))')
    raise UserError(f'{hf_dir} has no vocab.txt: save the model\'s tokenizer there too '
                    '(tokenizer.save_pretrained(dir)); sharedbert tokenizes with it')
  else:
    tokenizer = tokenizer_lib.read_wordpiece(hf_dir)
  if tokenizer.vocab_size > model_cfg.vocab_size:
    raise UserError(f'{os.path.join(hf_dir, "vocab.txt")} has {tokenizer.vocab_size} tokens but '
                    f'the word embedding has {model_cfg.vocab_size} rows: they do not belong '
                    'together')
  return tokenizer
