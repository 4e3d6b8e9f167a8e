"""Vocabularies: WordPiece (imported) and sentencepiece, and the tokenizer.json export gives.

The Hugging Face side is the `tokenizers` library (a runtime dependency); transformers is
not needed. tests/fixtures/hf_bert_tiny/tokenizer.json was written by transformers'
BertTokenizer (tools/make_hf_golden.py), so its ids are Hugging Face's own.
"""

import json
import os

import numpy as np
import pytest
from tokenizers import Tokenizer as HfTokenizer

from sharedbert.convert import hf as convert_hf
from sharedbert.data import demo_corpus, pretrain
from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.errors import UserError

FIXTURE = os.path.join(os.path.dirname(__file__), 'fixtures', 'hf_bert_tiny')
SENTENCES = [
    'The cat sat on the mat.', 'the king and queen of france, in paris!',
    'Big red houses walked slowly?', "the dog's book - first time", 'THE DOG RAN',
    'Übung café naïve', '日本 the', '  spaces   between  words  ', '',
    'the [MASK] sat on the [MASK].', '[CLS] the [SEP] a [PAD] an [UNK]', 'the[MASK]cat',
    'unknownword zzz', 'x' * 120,
]


def write_vocab(directory, tokens, config=None):
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, 'vocab.txt'), 'w', encoding='utf-8') as f:
    f.write(''.join(t + '\n' for t in tokens))
  if config is not None:
    with open(os.path.join(directory, 'tokenizer_config.json'), 'w') as f:
      json.dump(config, f)
  return str(directory)


def test_wordpiece_ids_are_hugging_faces():
  ours = tokenizer_lib.read_wordpiece(FIXTURE)
  hf = HfTokenizer.from_file(os.path.join(FIXTURE, 'tokenizer.json'))
  assert (ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id, ours.mask_id) == (0, 3, 4, 5, 6)
  assert ours.vocab_size == 99 and ours.lowercase
  for text in SENTENCES:
    assert ours.encode([text])[0] == hf.encode(text, add_special_tokens=False).ids, text
    ids, segments = ours.encode_pair(text, 'a cat', 64)
    want = hf.encode(text, 'a cat')
    assert ids.tolist() == want.ids and segments.tolist() == want.type_ids, text


def test_wordpiece_golden_pieces_casing_and_specials(tmp_path):
  tokens = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'the', 'The', 'cat', '##s', 'sat',
            '.', 'c', '##a', '##t']
  lower = tokenizer_lib.read_wordpiece(write_vocab(tmp_path / 'lower', tokens))
  pieces = lambda tok, text: [tok.id_to_piece(i) for i in tok.encode([text])[0]]
  assert pieces(lower, 'The cats SAT.') == ['the', 'cat', '##s', 'sat', '.']
  assert pieces(lower, 'the [MASK] sat') == ['the', '[MASK]', 'sat']
  assert pieces(lower, 'dog') == ['[UNK]']
  assert lower.decode(lower.encode(['The cats sat.'])[0]) == 'the cats sat.'
  cased = tokenizer_lib.read_wordpiece(
      write_vocab(tmp_path / 'cased', tokens, {'do_lower_case': False}))
  assert pieces(cased, 'The cats') == ['The', 'cat', '##s']
  assert pieces(cased, 'THE') == ['[UNK]']
  ids, segments = lower.encode_pair('the cats', 'sat', 7)
  assert ids.tolist() == [2, 5, 7, 8, 3, 9, 3] and segments.tolist() == [0] * 5 + [1] * 2
  assert lower.special_ids == (0, 1, 2, 3, 4) and lower.token_text(8) == '##s'
  # Longest-first truncation as Hugging Face's tokenizers do it: the shorter text (the first,
  # on a tie) keeps floor(budget / 2), the other the rest. 'the cats sat' and 'sat the cats'
  # are 4 pieces each: 3 + 3 at max_len 9 (budget 6), 2 + 3 at max_len 8 (budget 5).
  ids, segments = lower.encode_pair('the cats sat', 'sat the cats', 9)
  assert ids.tolist() == [2, 5, 7, 8, 3, 9, 5, 7, 3]
  ids, segments = lower.encode_pair('the cats sat', 'sat the cats', 8)
  assert ids.tolist() == [2, 5, 7, 3, 9, 5, 7, 3] and segments.tolist() == [0] * 4 + [1] * 4
  # A short first text is kept whole; the long second one takes the rest.
  ids, _ = lower.encode_pair('sat', 'the cats sat the cats', 7)
  assert ids.tolist() == [2, 9, 3, 5, 7, 8, 3]


def test_bad_wordpiece_vocabularies(tmp_path):
  with pytest.raises(UserError, match='no \\[MASK\\] token'):
    tokenizer_lib.read_wordpiece(write_vocab(tmp_path / 'a', ['[PAD]', '[UNK]', '[CLS]', '[SEP]']))
  with pytest.raises(UserError, match='padding token at id 0'):
    tokenizer_lib.read_wordpiece(write_vocab(tmp_path / 'b', ['[UNK]', '[PAD]', '[CLS]',
                                                              '[SEP]', '[MASK]']))
  with pytest.raises(UserError, match='not supported'):
    tokenizer_lib.read_wordpiece(write_vocab(
        tmp_path / 'c', ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'],
        {'tokenizer_class': 'XLMRobertaTokenizer'}))
  both = tmp_path / 'both'
  write_vocab(both, ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'])
  (both / 'vocab.model').write_bytes(b'x')
  with pytest.raises(UserError, match='both'):
    tokenizer_lib.load_workdir(str(both))


@pytest.fixture(scope='module')
def sentencepiece():
  docs = demo_corpus.documents()[:400]
  return tokenizer_lib.train(docs, 300, max_sentences=4000), docs


def test_sentencepiece_export_gives_the_same_ids(sentencepiece, tmp_path):
  tok, docs = sentencepiece
  path = tmp_path / 'tokenizer.json'
  tok.to_hf_tokenizer().save(str(path))
  hf = HfTokenizer.from_file(str(path))  # What AutoTokenizer wraps.
  lines = [l for d in docs[300:400] for l in d.splitlines() if l.strip()] + SENTENCES
  mismatched = [t for t in lines if tok.encode([t])[0] != hf.encode(t, add_special_tokens=False).ids]
  # Equal-score splits may go either way (README); on this text there are none.
  assert not mismatched, mismatched[:3]
  for text in SENTENCES[:4]:
    ids, segments = tok.encode_pair(text, 'the end', 128)
    want = hf.encode(text, 'the end')
    assert ids.tolist() == want.ids and segments.tolist() == want.type_ids
  assert hf.decode(hf.encode('Return the list.').ids) == tok.decode(tok.encode(['Return the list.'])[0])


def test_sentencepiece_specials_in_text(sentencepiece):
  tok, _ = sentencepiece
  ids = tok.encode(['the [MASK] sat'])[0]
  # No lone ▁ before [MASK]: the text on each side is encoded on its own.
  assert ids == tok.encode(['the'])[0] + [tokenizer_lib.MASK_ID] + tok.encode(['sat'])[0]
  assert tok.encode(['plain text, no specials'])[0] == tok.sp.encode('plain text, no specials')


def test_bpe_sentencepiece_does_not_export():
  tok = tokenizer_lib.train(demo_corpus.documents()[:100], 200, model_type='bpe',
                            max_sentences=1000)
  with pytest.raises(UserError, match='only unigram'):
    tok.to_hf_tokenizer()


def test_masking_with_wordpiece_special_ids():
  tok = tokenizer_lib.read_wordpiece(FIXTURE)
  rows = pretrain.pack([list(range(7, 40)), list(range(40, 99))], 16, **pretrain.pack_ids(tok))
  assert (rows[:, 0] == tok.cls_id).all() and tok.sep_id in rows
  batch = pretrain.mask_rows(rows, np.stack([np.zeros(len(rows)), np.arange(len(rows))], 1),
                             seed=0, mask_rate=0.5, max_predictions=8, vocab_size=99,
                             special_ids=tok.special_ids, mask_id=tok.mask_id)
  labels = batch['masked_ids'][batch['masked_weights'] > 0]
  assert not np.isin(labels, tok.special_ids).any()
  changed = batch['input_ids'][batch['input_ids'] != rows]
  assert (changed == tok.mask_id).mean() > 0.5
  assert not np.isin(changed[changed != tok.mask_id], tok.special_ids).any()
  assert (batch['input_mask'] == (rows != 0)).all()


def test_import_refuses_missing_unsupported_and_oversized_vocabularies(tmp_path):
  hf = tmp_path / 'hf'
  hf.mkdir()
  for name in ('config.json', 'model.safetensors'):
    (hf / name).write_bytes(open(os.path.join(FIXTURE, name), 'rb').read())
  with pytest.raises(UserError, match='no vocab.txt: save the model'):
    convert_hf.import_hf(str(hf), str(tmp_path / 'w'))
  (hf / 'spiece.model').write_bytes(b'x')
  with pytest.raises(UserError, match='WordPiece vocabularies only'):
    convert_hf.import_hf(str(hf), str(tmp_path / 'w'))
  (hf / 'spiece.model').unlink()
  write_vocab(hf, open(os.path.join(FIXTURE, 'vocab.txt')).read().split() + ['extra'])
  with pytest.raises(UserError, match='100 tokens but the word embedding has 99 rows'):
    convert_hf.import_hf(str(hf), str(tmp_path / 'w'))
  assert sorted(os.listdir(tmp_path)) == ['hf']  # Nothing written, not even a temp dir.


@pytest.mark.parametrize('damage', ['empty', 'random', 'truncated'])
def test_a_damaged_vocab_model_is_one_error_naming_it(sentencepiece, tmp_path, damage):
  """Issue 44, item 5: an empty, random or truncated vocab.model gave a sentencepiece
  traceback in a resume, a GLUE init_from or an export (all load it through here)."""
  import numpy as np
  from sharedbert.errors import UserError
  tok, _ = sentencepiece
  good = tmp_path / 'good.model'
  tokenizer_lib.save(tok, str(good))
  data = good.read_bytes()
  path = tmp_path / 'vocab.model'
  path.write_bytes({'empty': b'',
                    'random': np.random.default_rng(0).bytes(len(data)),
                    'truncated': data[:len(data) // 3]}[damage])
  with pytest.raises(UserError, match=f'the vocabulary {path} is (empty|damaged)'):
    tokenizer_lib.load(str(path))
  assert tokenizer_lib.load(str(good)).vocab_size == tok.vocab_size
