"""Text sources for pretraining: `config.data.corpus` names one of

  demo                 the embedded corpus (`demo_corpus`: standard-library docstrings);
  a local path         a .txt file, or a directory searched recursively for .txt files;
                       documents are separated by blank lines;
  tfds:NAME[/CONFIG]   a tensorflow-datasets text dataset (e.g. tfds:wikipedia/20230601.en)
                       read from `config.data.tfds_data_dir`; the text field is
                       `config.data.tfds_text_key`.

Local corpora are small enough to hold in memory and are split into train and held-out
documents by a fixed hash of each document's index. tfds corpora are streamed, each process
reading its own shard (`tfds.split_for_jax_process`).
"""

from __future__ import annotations

import os
import zlib

from absl import logging
from typing import Iterator

from sharedbert.data import demo_corpus
from sharedbert.errors import UserError


class CorpusError(UserError):
  """A corpus that cannot be read; its hint names config.data.corpus, the key of a
  pretraining config (the study names its own, `CORPUS_KEY`)."""


CORPUS_KEY = 'config.data.corpus'


def is_tfds(corpus: str) -> bool:
  """Whether `corpus` names a tfds dataset ('tfds:name/config').

  Args:
    corpus: data.corpus.
  Returns:
    True for 'tfds:...'.
  """
  return corpus.startswith('tfds:')


def _text_files(path: str) -> list[str]:
  if os.path.islink(path) and not os.path.exists(path):
    raise CorpusError(f'corpus path {path} is a broken symbolic link or a loop of them; set '
                      f'{CORPUS_KEY} to demo, a .txt file or directory, or tfds:NAME')
  if os.path.isfile(path):
    return [path]
  if os.path.isdir(path):
    files, skipped = [], []
    for dirpath, dirnames, filenames in os.walk(path):
      dirnames.sort()
      for name in sorted(filenames):
        (files if name.endswith('.txt') else skipped).append(os.path.join(dirpath, name))
    for file in files:
      if not os.path.isfile(file):  # os.walk lists a dangling or looping link as a file.
        raise UserError(f'corpus file {file} cannot be read: a broken symbolic link or a loop '
                        'of them; remove it or fix its target')
    if not files:
      raise CorpusError(f'corpus directory {path} has no .txt files; point {CORPUS_KEY} '
                        'at a .txt file or a directory of them')
    if skipped:
      _warn_once(f'corpus directory {path}: reading its {len(files)} .txt file(s), skipping '
                 f'{len(skipped)} other file(s) (e.g. {skipped[0]})')
    return files
  raise CorpusError(f'corpus path {path} does not exist; set {CORPUS_KEY} to demo, '
                    'a .txt file or directory, or tfds:NAME')


# What has been said: a corpus is read by the preflight and again by the pipeline.
_warned: set[str] = set()


def _warn_once(message: str):
  if message not in _warned:
    _warned.add(message)
    logging.warning('%s', message)


def _read_text(path: str) -> str:
  try:
    with open(path, 'rb') as f:
      raw = f.read()
  except OSError as e:
    raise UserError(f'corpus file {path} cannot be read ({e.strerror or e})') from None
  if b'\0' in raw[:65536]:
    raise UserError(f'corpus file {path} is not text (it contains NUL bytes)')
  try:
    return raw.decode('utf-8-sig')
  except UnicodeDecodeError as e:
    # Real corpora mix in a few Latin-1/cp1252 bytes; read those files as cp1252 rather
    # than refuse a whole corpus, and say so.
    _warn_once(f'corpus file {path} is not valid UTF-8 (byte {e.start}); reading it as cp1252')
    return raw.decode('cp1252', errors='replace')


def local_documents(path: str) -> list[str]:
  """All documents of a local corpus: paragraphs separated by blank lines.

  Args:
    path: a text file or a folder of them.
  Returns:
    The documents, in file order.
  """
  docs = []
  for file in _text_files(path):
    text = _read_text(file).replace('\r\n', '\n').replace('\r', '\n')
    for para in text.split('\n\n'):
      para = ' '.join(para.split())
      if para:
        docs.append(para)
  if not docs:
    raise UserError(f'corpus {path} is empty: no text found')
  return docs


def in_memory_documents(corpus: str) -> list[str]:
  """The documents of a local corpus (a file or folder of text) or of 'demo'.

  Args:
    corpus: a path or 'demo'.
  Returns:
    The documents.
  """
  if corpus == 'demo':
    return demo_corpus.documents()
  return local_documents(os.path.expanduser(corpus))


def is_heldout(index: int, eval_fraction: float) -> bool:
  """A fixed pseudo-random choice of held-out documents, the same on every process.

  Args:
    index: the document's index.
    eval_fraction: the held-out share.
  Returns:
    Whether it is held out.
  """
  return zlib.crc32(index.to_bytes(8, 'little')) / 2**32 < eval_fraction


def split_documents(docs: list[str], split: str, eval_fraction: float) -> list[str]:
  """The documents of `split` ('train' or 'eval', by a fixed hash of the index); a UserError
  when none are left.

  Args:
    docs: every document.
    split: 'train' or 'eval'.
    eval_fraction: the held-out share.
  Returns:
    The split's documents.
  """
  keep_heldout = split == 'eval'
  out = [d for i, d in enumerate(docs) if is_heldout(i, eval_fraction) == keep_heldout]
  if not out:
    raise UserError(f'corpus has no {split} documents (only {len(docs)} documents in all; '
                    'config.data.eval_fraction may be 0 or 1, or the corpus is too small)')
  return out


def _tfds_name(corpus: str) -> str:
  name = corpus[len('tfds:'):]
  if not name:
    raise UserError("config.data.corpus 'tfds:' needs a dataset name, e.g. tfds:wikipedia/20230601.en")
  return name


def tfds_builder(corpus: str, data_dir: str | None):
  """The tfds builder for `corpus`; a UserError for an unknown name.

  Args:
    corpus: 'tfds:name[/config]'.
    data_dir: where tfds datasets are prepared (None: its default).
  Returns:
    The builder.
  """
  import tensorflow_datasets as tfds
  name = _tfds_name(corpus)
  try:
    return tfds.builder(name, data_dir=data_dir or None)
  except Exception as e:  # tfds raises several types for unknown names/configs.
    raise UserError(f'tfds dataset {name!r} is unknown to tensorflow-datasets: {e}'.split('\n')[0]) from e


def open_tfds_split(builder, split: str):
  """builder.as_dataset, turning tfds' 'not prepared' failure into a UserError.

  (Asking `builder.is_prepared()` first would also refuse tfds.testing.mock_data.)

  Args:
    builder: a tfds builder.
    split: a split name.
  Returns:
    The tf.data.Dataset.
  """
  try:
    return builder.as_dataset(split=split, shuffle_files=False)
  except AssertionError as e:
    raise UserError(
        f'tfds dataset {builder.info.full_name!r} is not prepared in {builder.data_dir_root}; '
        f'this machine cannot download it. Prepare it where there is network access '
        f'(tfds build {builder.name}/{builder.builder_config.name if builder.builder_config else ""}'
        f' --data_dir=DIR) and set config.data.tfds_data_dir=DIR'.replace('/ --', ' --')) from e


def tfds_documents(corpus: str, split: str, *, data_dir: str | None, text_key: str,
                   eval_fraction: float, process_index: int = 0,
                   process_count: int = 1) -> Iterator[str]:
  """Streams documents of one process's shard of a tfds corpus, in a fixed order.

  Args:
    corpus: 'tfds:name[/config]'.
    split: 'train' or 'eval' (a held-out share of tfds' train split where it has no other).
    data_dir: where it is prepared.
    text_key: the text field.
    eval_fraction: the held-out share.
    process_index, process_count: this process's shard.
  Returns:
    An iterator of documents.
  """
  import tensorflow_datasets as tfds
  builder = tfds_builder(corpus, data_dir)
  splits = builder.info.splits
  if split == 'eval':
    tfds_split = next((s for s in ('validation', 'test') if s in splits), None)
    if tfds_split is None:
      pct = max(1, round(100 * eval_fraction))
      tfds_split = f'train[:{pct}%]'
  else:
    has_eval = any(s in splits for s in ('validation', 'test'))
    tfds_split = 'train' if has_eval else f'train[{max(1, round(100 * eval_fraction))}%:]'
  shard = tfds.split_for_jax_process(tfds_split, process_index=process_index,
                                     process_count=process_count)
  ds = open_tfds_split(builder, shard)
  for example in tfds.as_numpy(ds):
    if text_key not in example:
      raise UserError(f'tfds dataset {builder.name} has no field {text_key!r} '
                      f'(config.data.tfds_text_key); fields: {sorted(example)}')
    text = example[text_key]
    text = text.decode('utf-8') if isinstance(text, bytes) else str(text)
    for para in text.split('\n\n'):
      para = ' '.join(para.split())
      if para:
        yield para
