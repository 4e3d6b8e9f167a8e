"""A sentencepiece vocabulary with BERT's special tokens at fixed ids.

The vocabulary is learned from the training corpus on first use and written to
`WORKDIR/vocab.model`; later runs in that workdir (a resume, a fine-tune) reuse it.
Ids: 0 [PAD], 1 <unk>, 2 [CLS], 3 [SEP], 4 [MASK], then the learned pieces. [CLS], [SEP] and
[MASK] are user-defined symbols, so the text "[MASK]" encodes to the mask id (fill_mask).
"""

from __future__ import annotations

import io
import os
import re
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm
import tensorflow as tf

from sharedbert.errors import UserError

PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = 0, 1, 2, 3, 4
NUM_SPECIAL = 5
VOCAB_FILE = 'vocab.model'


class Tokenizer:
  """Wraps a SentencePieceProcessor; `encode` returns ids without special tokens."""

  def __init__(self, model_proto: bytes):
    self.model_proto = model_proto
    self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
    expected = {PAD_ID: '[PAD]', UNK_ID: '<unk>', CLS_ID: '[CLS]', SEP_ID: '[SEP]', MASK_ID: '[MASK]'}
    for i, piece in expected.items():
      if self.sp.id_to_piece(i) != piece:
        raise UserError(f'vocabulary has {self.sp.id_to_piece(i)!r} at id {i}, expected '
                        f'{piece!r}: it was not made by sharedbert')

  @property
  def vocab_size(self) -> int:
    return self.sp.get_piece_size()

  def encode(self, texts: Sequence[str], num_threads: int = 0) -> list[list[int]]:
    return self.sp.encode(list(texts), out_type=int, num_threads=num_threads or -1)

  def decode(self, ids: Iterable[int]) -> str:
    return self.sp.decode([int(i) for i in ids if int(i) >= NUM_SPECIAL or int(i) == UNK_ID])

  def id_to_piece(self, i: int) -> str:
    return self.sp.id_to_piece(int(i))

  def encode_pair(self, a: str, b: str | None, max_len: int):
    """[CLS] a [SEP] (b [SEP]), truncated longest-first to max_len; ids and segments."""
    ids_a = self.sp.encode(a, out_type=int)
    ids_b = self.sp.encode(b, out_type=int) if b is not None else []
    budget = max_len - (3 if b is not None else 2)
    while len(ids_a) + len(ids_b) > budget:
      (ids_a if len(ids_a) >= len(ids_b) else ids_b).pop()
    ids = [CLS_ID] + ids_a + [SEP_ID]
    segments = [0] * len(ids)
    if b is not None:
      ids += ids_b + [SEP_ID]
      segments += [1] * (len(ids_b) + 1)
    return np.asarray(ids, np.int32), np.asarray(segments, np.int32)


def train(documents: Iterable[str], vocab_size: int, *, model_type: str = 'unigram',
          max_sentences: int = 2_000_000) -> Tokenizer:
  """Learns a vocabulary of at most `vocab_size` pieces (fewer if the text is small)."""
  model = io.BytesIO()
  try:
    _train_sentencepiece(documents, model, vocab_size, model_type, max_sentences)
  except RuntimeError as e:
    needed = re.search(r'smaller than required_chars\. \d+ vs (\d+)', str(e))
    if needed:
      raise UserError(f'model.vocab_size={vocab_size} is too small for this corpus: its '
                      f'characters and the special tokens need at least {needed.group(1)} '
                      'pieces; raise model.vocab_size') from None
    raise
  return Tokenizer(model.getvalue())


def _train_sentencepiece(documents, model, vocab_size, model_type, max_sentences):
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(documents), model_writer=model, vocab_size=vocab_size,
      model_type=model_type, pad_id=PAD_ID, unk_id=UNK_ID, bos_id=-1, eos_id=-1,
      pad_piece='[PAD]', user_defined_symbols=['[CLS]', '[SEP]', '[MASK]'],
      hard_vocab_limit=False, character_coverage=0.9995, input_sentence_size=max_sentences,
      shuffle_input_sentence=True, max_sentence_length=1 << 16, num_threads=os.cpu_count() or 1,
      minloglevel=2)


def load(path: str) -> Tokenizer:
  with tf.io.gfile.GFile(path, 'rb') as f:
    return Tokenizer(f.read())


def save(tokenizer: Tokenizer, path: str):
  tmp = path + '.tmp'
  with tf.io.gfile.GFile(tmp, 'wb') as f:
    f.write(tokenizer.model_proto)
  tf.io.gfile.rename(tmp, path, overwrite=True)  # Never a half-written vocabulary.
