"""The pretraining input pipeline: documents -> token ids -> packed sequences -> masked batches.

Packing (RoBERTa's FULL-SENTENCES, MLM only): documents are tokenized, each followed by
[SEP], concatenated in order, and cut into rows of seq_len-1 tokens, each row prefixed
with [CLS]; only the last row is padded. All segment ids are 0.

Masking (BERT's `create_masked_lm_predictions`): of the non-special tokens of a row,
round(mask_rate * n) are chosen (at least 1, at most `max_predictions`, which by default is
ceil(mask_rate * seq_len), so the cap never lowers the rate; see `max_predictions`): 80% become
[MASK], 10% a random token, 10% stay. Masking is dynamic (a row is masked afresh each
epoch) and deterministic: the mask of a row depends only on (seed, epoch, row index).

Batches are a pure function of the step: step s holds global rows s*B .. (s+1)*B-1 of a
per-epoch permutation, and each process takes its contiguous slice of them. So the
pipeline's position is the step, a resumed run sees exactly the batches it would have
seen, and any process count yields the same global batch. Streamed (tfds) corpora keep the
same contract within each process's shard and resume by replaying the stream.
"""

from __future__ import annotations

import itertools
import math
import os
import queue
import threading
from typing import Iterator

import numpy as np

from sharedbert.data import sources
from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.data.tokenizer import CLS_ID, MASK_ID, NUM_SPECIAL, PAD_ID, SEP_ID
from sharedbert.errors import UserError

Batch = dict[str, np.ndarray]


def pack(token_lists, seq_len: int, *, cls_id: int = CLS_ID, sep_id: int = SEP_ID,
         pad_id: int = PAD_ID) -> np.ndarray:
  """Packs tokenized documents into [N, seq_len] int32 rows (see module docstring).

  Args:
    token_lists: each document's token ids.
    seq_len: the row length.
    cls_id, sep_id, pad_id: the special ids.
  Returns:
    [N, seq_len] int32.
  """
  stream = np.fromiter(
      itertools.chain.from_iterable(itertools.chain(ids, (sep_id,)) for ids in token_lists),
      dtype=np.int32)
  body = seq_len - 1
  num_rows = -(-len(stream) // body)
  padded = np.full(num_rows * body, pad_id, np.int32)
  padded[:len(stream)] = stream
  rows = padded.reshape(num_rows, body)
  return np.concatenate([np.full((num_rows, 1), cls_id, np.int32), rows], axis=1)


def pack_ids(tokenizer) -> dict:
  """pack()'s special ids for a tokenizer.

  Args:
    tokenizer: the vocabulary.
  Returns:
    {'cls_id', 'sep_id', 'pad_id'}.
  """
  return dict(cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id, pad_id=tokenizer.pad_id)


def max_predictions(data_cfg) -> int:
  """Masked positions per sequence: `data.max_predictions`, or when it is 0 (the default)
  ceil(mask_rate * seq_len), which never cuts the masking rate (BERT: 20 at 128 and 15%).

  Args:
    data_cfg: config.data.
  Returns:
    The count.
  """
  if data_cfg.max_predictions:
    return int(data_cfg.max_predictions)
  return max(1, math.ceil(round(data_cfg.mask_rate * data_cfg.seq_len, 6)))


def batch_shapes(global_batch: int, seq_len: int, max_predictions_: int) -> dict:
  """{key: (shape, dtype)} of a global batch as mask_rows makes it (to compile ahead).

  Args:
    global_batch: rows a step.
    seq_len: tokens a row.
    max_predictions_: masked positions a row.
  Returns:
    {key: (shape, dtype)}.
  """
  tokens, masked = (global_batch, seq_len), (global_batch, max_predictions_)
  return {'input_ids': (tokens, np.int32), 'segment_ids': (tokens, np.int32),
          'input_mask': (tokens, np.int32), 'masked_positions': (masked, np.int32),
          'masked_ids': (masked, np.int32), 'masked_weights': (masked, np.float32)}


def mask_rows(rows: np.ndarray, keys: np.ndarray, *, seed: int, mask_rate: float,
              max_predictions: int, vocab_size: int,
              special_ids: tuple = tuple(range(NUM_SPECIAL)), mask_id: int = MASK_ID,
              pad_id: int = PAD_ID) -> Batch:
  """Masks each row with its own RNG, keyed by (seed, *keys[i]); returns a model batch.

  Special ids are never chosen; random replacements are drawn from the other ids below
  vocab_size (for sentencepiece, whose specials are 0-4, exactly [5, vocab_size)).

  Args:
    rows: packed token ids [B, T] (pad_id after the row's end).
    keys: [B, k] integers that identify each row (its position in the data), so that a
      row is masked the same way whatever batch or process it lands in.
    seed: the run's masking seed.
    mask_rate: the fraction of a row's real, non-special tokens chosen (BERT's 80/10/10
      split among [MASK], a random id and the token itself).
    max_predictions: masked slots a row has (P).
    vocab_size, special_ids, mask_id, pad_id: the vocabulary.
  Returns:
    input_ids, segment_ids, input_mask [B, T]; masked_positions, masked_ids [B, P] int32;
    masked_weights [B, P] float32.
  """
  b, t = rows.shape
  special = np.asarray(sorted(special_ids), np.int64)
  normal = np.setdiff1d(np.arange(vocab_size), special)
  input_ids = rows.copy()
  positions = np.zeros((b, max_predictions), np.int32)
  labels = np.zeros((b, max_predictions), np.int32)
  weights = np.zeros((b, max_predictions), np.float32)
  for i in range(b):
    rng = np.random.default_rng([seed, *(int(k) for k in keys[i])])
    candidates = np.flatnonzero(~np.isin(rows[i], special))
    if not len(candidates):
      continue
    n = min(max_predictions, max(1, int(round(len(candidates) * mask_rate))))
    chosen = np.sort(rng.choice(candidates, size=n, replace=False))
    positions[i, :n] = chosen
    labels[i, :n] = rows[i, chosen]
    weights[i, :n] = 1.0
    action = rng.random(n)
    replaced = np.where(action < 0.8, mask_id,
                        np.where(action < 0.9, normal[rng.integers(0, len(normal), n)],
                                 rows[i, chosen]))
    input_ids[i, chosen] = replaced
  return {
      'input_ids': input_ids,
      'segment_ids': np.zeros_like(rows),
      'input_mask': (rows != pad_id).astype(np.int32),
      'masked_positions': positions,
      'masked_ids': labels,
      'masked_weights': weights,
  }


class InMemoryData:
  """Packed rows held in memory; batch(step) is exact and random-access."""

  def __init__(self, rows: np.ndarray, *, global_batch: int, process_index: int,
               process_count: int, seed: int, shuffle: bool, masking: dict):
    if len(rows) < global_batch and shuffle:
      # Still works (epochs wrap), but say how little data there is.
      pass
    self.rows = rows
    self.global_batch = global_batch
    self.local_batch = global_batch // process_count
    self.process_index = process_index
    self.seed = seed
    self.shuffle = shuffle
    self.masking = masking
    self._perm_cache: dict[int, np.ndarray] = {}

  @property
  def num_rows(self) -> int:
    """The number of packed rows in one epoch."""
    return len(self.rows)

  def _permutation(self, epoch: int) -> np.ndarray:
    if not self.shuffle:
      return np.arange(self.num_rows)
    if epoch not in self._perm_cache:
      self._perm_cache = {epoch: np.random.default_rng([self.seed, 7, epoch]).permutation(self.num_rows)}
    return self._perm_cache[epoch]

  def batch(self, step: int) -> Batch:
    """This process's rows of global batch `step`, masked for its epoch (a pure function of
    step)."""
    start = step * self.global_batch + self.process_index * self.local_batch
    g = np.arange(start, start + self.local_batch)
    epoch, within = g // self.num_rows, g % self.num_rows
    idx = np.empty_like(g)
    for e in np.unique(epoch):
      sel = epoch == e
      idx[sel] = self._permutation(int(e))[within[sel]]
    keys = np.stack([epoch, idx], axis=1)
    return mask_rows(self.rows[idx], keys, seed=self.seed, **self.masking)

  def batches(self, start_step: int = 0) -> Iterator[Batch]:
    """batch(step) for step = start_step, start_step + 1, ... (endless)."""
    for step in itertools.count(start_step):
      yield self.batch(step)


class StreamingData:
  """Rows packed on the fly from a streamed (tfds) corpus, one shard per process.

  Shuffles within a seeded buffer; resuming at step s replays the stream and skips the
  rows already consumed, so it sees the same batches as an uninterrupted run.
  """

  def __init__(self, documents_fn, tokenizer, *, seq_len: int, global_batch: int,
               process_count: int, process_index: int, seed: int, masking: dict,
               shuffle_buffer: int = 10_000, chunk_docs: int = 1_000):
    self.documents_fn = documents_fn
    self.tokenizer = tokenizer
    self.seq_len = seq_len
    self.local_batch = global_batch // process_count
    self.process_index = process_index
    self.seed = seed
    self.masking = masking
    self.shuffle_buffer = shuffle_buffer
    self.chunk_docs = chunk_docs

  def _rows(self) -> Iterator[np.ndarray]:
    for epoch in itertools.count():
      docs = self.documents_fn()
      any_rows = False
      while chunk := list(itertools.islice(docs, self.chunk_docs)):
        for row in pack(self.tokenizer.encode(chunk), self.seq_len,
                        **pack_ids(self.tokenizer)):
          any_rows = True
          yield row
      if not any_rows:
        raise UserError('the tfds corpus yielded no text for this process')

  def _shuffled(self) -> Iterator[np.ndarray]:
    rng = np.random.default_rng([self.seed, 11, self.process_index])
    buf = []
    for row in self._rows():
      if len(buf) < self.shuffle_buffer:
        buf.append(row)
        continue
      j = rng.integers(len(buf))
      yield buf[j]
      buf[j] = row

  def batches(self, start_step: int = 0) -> Iterator[Batch]:
    """This process's batches from `start_step` on (the earlier rows skipped), endless."""
    rows = self._shuffled()
    for _ in range(start_step * self.local_batch):
      next(rows)
    for step in itertools.count(start_step):
      block = np.stack([next(rows) for _ in range(self.local_batch)])
      n = np.arange(step * self.local_batch, (step + 1) * self.local_batch)
      keys = np.stack([np.full_like(n, self.process_index), n], axis=1)
      yield mask_rows(block, keys, seed=self.seed, **self.masking)


def majority_baseline(batches) -> float:
  """Held-out accuracy of always predicting the most frequent masked token: the floor a
  model must clearly beat.

  Args:
    batches: held-out batches (mask_rows' dicts).
  Returns:
    The accuracy, a fraction.
  """
  labels = np.concatenate([b['masked_ids'][b['masked_weights'] > 0] for b in batches])
  return float(np.bincount(labels).max() / max(len(labels), 1)) if len(labels) else 0.0


def prefetch(iterator: Iterator[Batch], size: int = 2) -> Iterator[Batch]:
  """Produces batches on a background thread so the accelerator never waits on numpy.

  Args:
    iterator: the batches.
    size: how many to make ahead.
  Returns:
    An iterator over the same batches.
  """
  q: queue.Queue = queue.Queue(maxsize=size)
  done = object()

  def work():
    try:
      for item in iterator:
        q.put(item)
    except BaseException as e:  # Re-raised in the consumer.
      q.put(e)
    q.put(done)

  threading.Thread(target=work, daemon=True).start()
  while (item := q.get()) is not done:
    if isinstance(item, BaseException):
      raise item
    yield item


class PretrainData:
  """Tokenizer plus train and held-out data for one process, built from `config.data`."""

  def __init__(self, config, vocab_path: str, *, process_index: int = 0, process_count: int = 1,
               is_vocab_writer: bool = True, wait_for_vocab=lambda: None):
    d = config.data
    if d.batch_size % process_count:
      raise UserError(f'data.batch_size={d.batch_size} is not divisible by the number of '
                      f'processes ({process_count})')
    self.config = config
    streaming = sources.is_tfds(d.corpus)
    docs = None
    if not streaming:
      docs = sources.in_memory_documents(d.corpus)
      train_docs = sources.split_documents(docs, 'train', d.eval_fraction)
      eval_docs = sources.split_documents(docs, 'eval', d.eval_fraction)
    else:
      # Fail early, before any vocabulary work, if the dataset is not prepared.
      sources.open_tfds_split(sources.tfds_builder(d.corpus, d.tfds_data_dir), 'train')

    def tfds_docs(split, index=process_index, count=process_count):
      return sources.tfds_documents(
          d.corpus, split, data_dir=d.tfds_data_dir, text_key=d.tfds_text_key,
          eval_fraction=d.eval_fraction, process_index=index, process_count=count)

    self.tokenizer = self._load_or_train_vocab(
        vocab_path, lambda: train_docs if docs is not None else tfds_docs('train', 0, 1),
        is_vocab_writer, wait_for_vocab)
    if self.tokenizer.vocab_size > config.model.vocab_size:
      raise UserError(f'the vocabulary at {vocab_path} has {self.tokenizer.vocab_size} pieces '
                      f'but model.vocab_size is {config.model.vocab_size}')
    tok = self.tokenizer
    masking = dict(mask_rate=d.mask_rate, max_predictions=max_predictions(d),
                   vocab_size=tok.vocab_size, special_ids=tok.special_ids,
                   mask_id=tok.mask_id, pad_id=tok.pad_id)
    common = dict(global_batch=d.batch_size, process_index=process_index,
                  process_count=process_count, masking=masking)
    # The held-out set is masked at `data.eval_mask_rate` whatever the training rate, so that
    # runs trained at different rates are scored on the same task.
    eval_masking = dict(masking, mask_rate=d.eval_mask_rate,
                        max_predictions=max(1, math.ceil(round(d.eval_mask_rate * d.seq_len, 6))))
    eval_common = dict(common, masking=eval_masking)
    if streaming:
      self.train = StreamingData(lambda: tfds_docs('train'), self.tokenizer, seq_len=d.seq_len,
                                 seed=config.seed, shuffle_buffer=d.shuffle_buffer, **common)
      eval_stream = StreamingData(lambda: tfds_docs('eval'), self.tokenizer, seq_len=d.seq_len,
                                  seed=config.seed + 1, shuffle_buffer=1, **eval_common)
      n = max(config.eval_batches, 1)
      self.eval_batches = list(itertools.islice(eval_stream.batches(), n))
    else:
      train_rows = pack(tok.encode(train_docs), d.seq_len, **pack_ids(tok))
      eval_rows = pack(tok.encode(eval_docs), d.seq_len, **pack_ids(tok))
      self.train = InMemoryData(train_rows, seed=config.seed, shuffle=True, **common)
      # Fixed held-out batches (same masks at every evaluation, so figures compare). Every
      # held-out row is used once: the last batch is filled with [PAD] rows, which have
      # nothing to mask (weight 0), so a small held-out set is never wrapped around.
      n = -(-len(eval_rows) // d.batch_size)
      if config.eval_batches:
        n = min(n, config.eval_batches)
      padded = np.full((n * d.batch_size, d.seq_len), tok.pad_id, np.int32)
      kept = eval_rows[:len(padded)]
      padded[:len(kept)] = kept
      evaluation = InMemoryData(padded, seed=config.seed + 1, shuffle=False, **eval_common)
      self.eval_batches = [evaluation.batch(i) for i in range(n)]
      self.num_train_rows = len(train_rows)

  def _load_or_train_vocab(self, path, documents_fn, is_writer, wait):
    """Reuses the workdir's vocabulary (vocab.model, or the vocab.txt of a Hugging Face
    import), or learns a sentencepiece one from the training documents (process 0)."""
    import tensorflow as tf
    d = self.config.data
    if tokenizer_lib.vocab_kind(os.path.dirname(path)) == 'wordpiece':
      return tokenizer_lib.read_wordpiece(os.path.dirname(path))
    if is_writer and not tf.io.gfile.exists(path):
      tok = tokenizer_lib.train(
          documents_fn(), self.config.model.vocab_size, model_type=d.vocab_model_type,
          max_sentences=d.vocab_train_sentences)
      tokenizer_lib.save(tok, path)
    # Every process passes this barrier, whether or not it saw the file: one that checked
    # after the writer had finished would otherwise skip it and leave the writer waiting.
    wait()
    return tokenizer_lib.load(path)
