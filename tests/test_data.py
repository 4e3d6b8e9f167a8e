"""The pretraining input pipeline: sources, vocabulary, packing, masking, determinism."""

import numpy as np
import pytest
import tensorflow_datasets as tfds

from sharedbert import config as config_lib
from sharedbert.data import demo_corpus, pretrain, sources, tokenizer as tokenizer_lib
from sharedbert.data.tokenizer import CLS_ID, MASK_ID, NUM_SPECIAL, PAD_ID, SEP_ID
from sharedbert.errors import UserError

WORDS = ('the cat sat on a mat while seven dogs ran past the old red barn and a small bird '
         'sang of rain wind and snow in the north field').split()


def write_corpus(path, num_docs=120, seed=0):
  rng = np.random.default_rng(seed)
  docs = [' '.join(rng.choice(WORDS, size=rng.integers(20, 60))) + '.' for _ in range(num_docs)]
  path.write_text('\n\n'.join(docs), encoding='utf-8')
  return docs


def test_local_documents_split_on_blank_lines(tmp_path):
  (tmp_path / 'a.txt').write_text('First doc\nline two.\r\n\r\nSecond doc.\n\n\n', encoding='utf-8')
  (tmp_path / 'sub').mkdir()
  (tmp_path / 'sub' / 'b.txt').write_text('\ufeffThird doc.', encoding='utf-8')
  (tmp_path / 'ignored.bin').write_bytes(b'\0\1')
  assert sources.local_documents(str(tmp_path)) == ['First doc line two.', 'Second doc.', 'Third doc.']


def test_skipped_files_and_cp1252_are_said_once(tmp_path, monkeypatch):
  said = []
  monkeypatch.setattr(sources.logging, 'warning', lambda fmt, *a: said.append(fmt % a))
  monkeypatch.setattr(sources, '_warned', set())
  (tmp_path / 'a.txt').write_bytes('Caf\u00e9 \u2014 ok.'.encode('cp1252'))
  (tmp_path / 'notes.md').write_text('not read')
  (tmp_path / 'data.csv').write_text('not read')
  for _ in range(2):  # The preflight and the pipeline both read the corpus.
    assert sources.local_documents(str(tmp_path)) == ['Caf\u00e9 \u2014 ok.']
  assert said == [
      f'corpus directory {tmp_path}: reading its 1 .txt file(s), skipping 2 other file(s) '
      f'(e.g. {tmp_path}/data.csv)',
      f'corpus file {tmp_path}/a.txt is not valid UTF-8 (byte 3); reading it as cp1252']


@pytest.mark.parametrize('setup,match', [
    (lambda p: None, 'does not exist'),
    (lambda p: p.mkdir(), 'no .txt files'),
    (lambda p: p.write_text('\n\n  \n'), 'empty'),
    (lambda p: p.write_bytes(b'abc\0def'), 'not text'),
])
def test_bad_corpus_paths_are_user_errors(tmp_path, setup, match):
  path = tmp_path / 'corpus.txt' if 'text' in match or 'empty' in match else tmp_path / 'c'
  setup(path)
  with pytest.raises(UserError, match=match):
    sources.local_documents(str(path))


def test_heldout_split_is_fixed_and_disjoint():
  docs = [f'doc {i}' for i in range(2000)]
  train = sources.split_documents(docs, 'train', 0.1)
  heldout = sources.split_documents(docs, 'eval', 0.1)
  assert not set(train) & set(heldout)
  assert len(train) + len(heldout) == 2000
  assert 150 < len(heldout) < 250
  assert heldout == sources.split_documents(docs, 'eval', 0.1)


def test_demo_corpus_is_english_text_from_the_stdlib():
  docs = demo_corpus.documents(max_chars=50_000)
  assert len(docs) > 50
  assert all(len(d) >= demo_corpus.MIN_CHARS and d.isascii() for d in docs)
  text = ' '.join(docs).lower()
  assert text.count(' the ') > 100


@pytest.fixture(scope='module')
def tokenizer(tmp_path_factory):
  path = tmp_path_factory.mktemp('corpus') / 'c.txt'
  docs = write_corpus(path)
  return tokenizer_lib.train(docs, 200)


def test_tokenizer_special_ids(tokenizer, tmp_path):
  assert [tokenizer.id_to_piece(i) for i in range(NUM_SPECIAL)] == [
      '[PAD]', '<unk>', '[CLS]', '[SEP]', '[MASK]']
  assert MASK_ID in tokenizer.encode(['the [MASK] sat'])[0]
  ids = tokenizer.encode(['the cat sat'])[0]
  assert tokenizer.decode(ids) == 'the cat sat'
  tokenizer_lib.save(tokenizer, str(tmp_path / 'v.model'))
  assert tokenizer_lib.load(str(tmp_path / 'v.model')).encode(['a red barn']) == tokenizer.encode(
      ['a red barn'])
  ids, segs = tokenizer.encode_pair('the cat sat on a mat', 'seven dogs ran', max_len=8)
  assert len(ids) == 8 and ids[0] == CLS_ID and ids[-1] == SEP_ID
  assert list(segs).count(1) >= 2 and segs[0] == 0


def test_pack_rows():
  rows = pretrain.pack([[10, 11, 12], [13], [14, 15, 16, 17, 18]], seq_len=5)
  assert rows.tolist() == [[CLS_ID, 10, 11, 12, SEP_ID], [CLS_ID, 13, SEP_ID, 14, 15],
                           [CLS_ID, 16, 17, 18, SEP_ID]]
  rows = pretrain.pack([[10, 11]], seq_len=6)
  assert rows.tolist() == [[CLS_ID, 10, 11, SEP_ID, PAD_ID, PAD_ID]]


def test_masking_statistics_and_cap():
  rng = np.random.default_rng(0)
  rows = rng.integers(NUM_SPECIAL, 1000, (4000, 64)).astype(np.int32)
  rows[:, 0] = CLS_ID
  rows[:, -1] = SEP_ID
  rows[::2, 40:] = PAD_ID
  keys = np.stack([np.zeros(4000, int), np.arange(4000)], 1)
  b = pretrain.mask_rows(rows, keys, seed=0, mask_rate=0.15, max_predictions=8, vocab_size=1000)
  n = b['masked_weights'].sum(1)
  # 15% of the real tokens, capped at 8: 62 real tokens -> 8 (cap); 39 -> round(5.85) = 6.
  assert set(n[1::2]) == {8.0} and set(n[::2]) == {6.0}
  w = b['masked_weights'] > 0
  pos, labels = b['masked_positions'][w], b['masked_ids'][w]
  row_idx = np.nonzero(w)[0]
  np.testing.assert_array_equal(labels, rows[row_idx, pos])   # Labels are the originals.
  assert (labels >= NUM_SPECIAL).all()                         # Never [CLS]/[SEP]/[PAD].
  new = b['input_ids'][row_idx, pos]
  frac_mask = np.mean(new == MASK_ID)
  frac_same = np.mean(new == labels)
  frac_random = 1 - frac_mask - frac_same
  assert abs(frac_mask - 0.8) < 0.02
  assert abs(frac_same - 0.1) < 0.015   # (a random token equal to the original counts here)
  assert abs(frac_random - 0.1) < 0.015
  unmasked = np.ones_like(rows, bool)
  unmasked[row_idx, pos] = False
  np.testing.assert_array_equal(b['input_ids'][unmasked], rows[unmasked])
  np.testing.assert_array_equal(b['input_mask'], rows != PAD_ID)


def in_memory(rows, process_index=0, process_count=1, seed=0):
  return pretrain.InMemoryData(
      rows, global_batch=8, process_index=process_index, process_count=process_count,
      seed=seed, shuffle=True,
      masking=dict(mask_rate=0.15, max_predictions=5, vocab_size=500))


def test_batches_are_a_pure_function_of_the_step():
  rows = np.random.default_rng(0).integers(NUM_SPECIAL, 500, (30, 16)).astype(np.int32)
  data = in_memory(rows)
  first = list(zip(range(12), data.batches(0)))
  resumed = list(zip(range(7), in_memory(rows).batches(5)))
  for (_, a), (_, b) in zip(first[5:], resumed):
    for k in a:
      np.testing.assert_array_equal(a[k], b[k])
  # Masks differ across epochs (dynamic masking): row order and masks change.
  assert not np.array_equal(first[0][1]['input_ids'], first[4][1]['input_ids'])
  # Another seed, other batches.
  assert not np.array_equal(in_memory(rows, seed=1).batch(0)['input_ids'], first[0][1]['input_ids'])


def test_processes_split_the_global_batch():
  rows = np.random.default_rng(0).integers(NUM_SPECIAL, 500, (30, 16)).astype(np.int32)
  whole = in_memory(rows).batch(3)
  parts = [in_memory(rows, p, 2).batch(3) for p in range(2)]
  for k in whole:
    np.testing.assert_array_equal(whole[k], np.concatenate([p[k] for p in parts]))


def test_tfds_source_with_mock_data(tmp_path):
  """The tfds path, offline: mock_data serves random text for a registered dataset."""
  cfg = config_lib.pretrain_config('shared', 'tiny')
  cfg.data.corpus = 'tfds:lm1b'
  cfg.data.batch_size = 4
  cfg.data.seq_len = 32
  cfg.data.vocab_train_sentences = 1000
  cfg.data.shuffle_buffer = 16
  cfg.model.vocab_size = 300
  cfg.eval_batches = 2
  with tfds.testing.mock_data(num_examples=64):
    data = pretrain.PretrainData(cfg, str(tmp_path / 'vocab.model'))
    batches = data.train.batches(0)
    b0, b1 = next(batches), next(batches)
    again = next(pretrain.PretrainData(cfg, str(tmp_path / 'vocab.model')).train.batches(1))
  assert b0['input_ids'].shape == (4, 32)
  assert (b0['input_ids'][:, 0] == CLS_ID).all()
  assert b0['masked_weights'].sum() > 0
  assert len(data.eval_batches) == 2
  for k in b1:  # Resuming the stream at step 1 gives the same batch.
    np.testing.assert_array_equal(b1[k], again[k])


def test_unprepared_tfds_dataset_is_a_user_error(tmp_path):
  with pytest.raises(UserError, match='not prepared'):
    sources.open_tfds_split(sources.tfds_builder('tfds:lm1b', str(tmp_path)), 'train')
