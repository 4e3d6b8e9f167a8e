"""Vocabularies: sentencepiece (learned here) or WordPiece (imported from Hugging Face).

Both are a `Tokenizer`: `encode` (ids without special tokens), `encode_pair`, `decode`,
`id_to_piece`, `vocab_size` and the ids of [PAD], [UNK], [CLS], [SEP], [MASK]. Which one a
workdir uses is decided by the file it holds (`load_workdir`):

- `vocab.model`: sentencepiece, learned from the training corpus on first use and reused
  after. Ids: 0 [PAD], 1 <unk>, 2 [CLS], 3 [SEP], 4 [MASK], then the learned pieces.
- `vocab.txt` (+ `tokenizer_config.json`): a BERT WordPiece vocabulary, one token a line
  (id = line number), as Hugging Face's BertTokenizer reads it; `do_lower_case`,
  `strip_accents` and `tokenize_chinese_chars` come from tokenizer_config.json (default:
  lower case, as BertTokenizer). Tokenized by the `tokenizers` library (BertNormalizer,
  BertPreTokenizer, WordPiece), so the ids are those of the Hugging Face tokenizer. [PAD]
  must be id 0 (as in every BERT vocabulary); the other special ids are wherever the file
  puts them ([UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103 in Google's).

In both, the special tokens written in a text ("[MASK]") encode to their ids (fill_mask).
`to_hf_tokenizer` builds the `tokenizers.Tokenizer` that gives the same ids, for export.
"""

from __future__ import annotations

import io
import json
import os
import re
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2
from tokenizers import AddedToken
from tokenizers import Regex
from tokenizers import Tokenizer as HfTokenizer
from tokenizers import decoders
from tokenizers import models
from tokenizers import normalizers
from tokenizers import pre_tokenizers
from tokenizers import processors

from sharedbert.utils import paths
from sharedbert.errors import UserError

# The sentencepiece vocabulary's fixed ids.
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = 0, 1, 2, 3, 4
NUM_SPECIAL = 5
VOCAB_FILE = 'vocab.model'
WORDPIECE_FILE = 'vocab.txt'
WORDPIECE_CONFIG = 'tokenizer_config.json'
# Every file that can make up a workdir's vocabulary (copied along by the converters).
VOCAB_FILES = (VOCAB_FILE, WORDPIECE_FILE, WORDPIECE_CONFIG)
SPECIAL_NAMES = ('pad', 'unk', 'cls', 'sep', 'mask')


class Tokenizer:
  """The interface; `encode` returns ids without special tokens."""
  kind = ''
  pad_id = unk_id = cls_id = sep_id = mask_id = -1

  @property
  def vocab_size(self) -> int:
    """The number of tokens, special ones included."""
    raise NotImplementedError

  @property
  def special_ids(self) -> tuple[int, ...]:
    """Never masked in pretraining, never proposed by fill_mask."""
    return tuple(sorted({self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id}))

  def special_tokens(self) -> dict[str, str]:
    """{'pad': '[PAD]', 'unk': ..., 'cls', 'sep', 'mask'}: the tokens of the special ids."""
    return {n: self.id_to_piece(getattr(self, f'{n}_id')) for n in SPECIAL_NAMES}

  def encode(self, texts: Sequence[str], num_threads: int = 0) -> list[list[int]]:
    """The ids of each text, without [CLS]/[SEP]."""
    raise NotImplementedError

  def decode(self, ids: Iterable[int]) -> str:
    """Text of ids; [PAD], [CLS], [SEP] and [MASK] dropped."""
    raise NotImplementedError

  def id_to_piece(self, i: int) -> str:
    """The vocabulary's piece for id `i`."""
    raise NotImplementedError

  def token_text(self, i: int) -> str:
    """One token as text (fill_mask's 'token')."""
    raise NotImplementedError

  def text_of(self, ids: Sequence[int]) -> str:
    """Text of ids with [MASK] kept and [PAD], [CLS], [SEP] dropped (fill_mask's 'sequence')."""
    raise NotImplementedError

  def encode_pair(self, a: str, b: str | None, max_len: int):
    """[CLS] a [SEP] (b [SEP]), truncated longest-first to max_len; ids and segments.

    Longest-first as Hugging Face's (Rust) tokenizers do it: the shorter text keeps up to
    half the budget (the first, on a tie), the longer the rest; when both are over half,
    the shorter keeps floor(budget / 2) and the longer the other ceil. (Popping one token
    at a time, as BERT's `_truncate_seq_pair` does, cuts some pairs one token differently;
    the GLUE parity check found 22 of MRPC's 408 dev pairs so at 64 tokens.)"""
    ids_a = self.encode([a])[0]
    ids_b = self.encode([b])[0] if b is not None else []
    budget = max_len - (3 if b is not None else 2)
    if b is None:
      ids_a = ids_a[:budget]
    elif len(ids_a) + len(ids_b) > budget:
      keep_short = min(len(ids_a), len(ids_b), budget // 2)
      keep_long = budget - keep_short
      if len(ids_a) > len(ids_b):  # b is the shorter.
        ids_a, ids_b = ids_a[:keep_long], ids_b[:keep_short]
      else:
        ids_a, ids_b = ids_a[:keep_short], ids_b[:keep_long]
    ids = [self.cls_id] + ids_a + [self.sep_id]
    segments = [0] * len(ids)
    if b is not None:
      ids += ids_b + [self.sep_id]
      segments += [1] * (len(ids_b) + 1)
    return np.asarray(ids, np.int32), np.asarray(segments, np.int32)

  def save(self, workdir: str):
    """Writes the vocabulary's file(s) into `workdir`, each atomically."""
    raise NotImplementedError


# ---------------------------------------------------------------------------------------
# sentencepiece.

# Special tokens written in a text are cut out before sentencepiece sees the rest, and
# each piece of text between them is encoded on its own: "the [MASK] sat" is ▁the [MASK]
# ▁sat (sentencepiece alone would put a lone ▁ before [MASK]). The exported tokenizer.json
# does the same, so Hugging Face gives the same ids.
_SP_SPECIALS = ('[PAD]', '<unk>', '[CLS]', '[SEP]', '[MASK]')
_SP_SPLIT = re.compile('(' + '|'.join(re.escape(s) for s in _SP_SPECIALS) + ')')


class SentencePieceTokenizer(Tokenizer):
  """A SentencePieceProcessor with BERT's special tokens at ids 0-4."""
  kind = 'sentencepiece'
  pad_id, unk_id, cls_id, sep_id, mask_id = PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID

  def __init__(self, model_proto: bytes):
    self.model_proto = model_proto
    self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
    expected = {PAD_ID: '[PAD]', UNK_ID: '<unk>', CLS_ID: '[CLS]', SEP_ID: '[SEP]', MASK_ID: '[MASK]'}
    for i, piece in expected.items():
      if self.sp.id_to_piece(i) != piece:
        raise UserError(f'vocabulary has {self.sp.id_to_piece(i)!r} at id {i}, expected '
                        f'{piece!r}: it was not made by sharedbert')
    self._special_of = {s: self.sp.piece_to_id(s) for s in _SP_SPECIALS}

  @property
  def vocab_size(self) -> int:
    return self.sp.get_piece_size()

  @property
  def special_ids(self) -> tuple[int, ...]:
    return tuple(range(NUM_SPECIAL))

  def encode(self, texts: Sequence[str], num_threads: int = 0) -> list[list[int]]:
    texts = list(texts)
    out = self.sp.encode(texts, out_type=int, num_threads=num_threads or -1)
    for i, text in enumerate(texts):
      if any(s in text for s in _SP_SPECIALS):
        out[i] = self._encode_with_specials(text)
    return out

  def _encode_with_specials(self, text: str) -> list[int]:
    ids = []
    for part in _SP_SPLIT.split(text):
      if part in self._special_of:
        ids.append(self._special_of[part])
      elif part.strip():
        ids += self.sp.encode(part, out_type=int)
    return ids

  def decode(self, ids: Iterable[int]) -> str:
    return self.sp.decode([int(i) for i in ids if int(i) >= NUM_SPECIAL or int(i) == UNK_ID])

  def id_to_piece(self, i: int) -> str:
    return self.sp.id_to_piece(int(i))

  def token_text(self, i: int) -> str:
    return self.id_to_piece(i).replace('\u2581', '')

  def text_of(self, ids: Sequence[int]) -> str:
    keep = [self.id_to_piece(i) for i in ids if int(i) not in (PAD_ID, CLS_ID, SEP_ID)]
    return ' '.join(''.join(keep).replace('\u2581', ' ').split())

  def save(self, workdir: str):
    save(self, os.path.join(workdir, VOCAB_FILE))

  def model_type(self) -> str:
    """The sentencepiece model's type: 'UNIGRAM' or 'BPE'."""
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(self.model_proto)
    return sentencepiece_model_pb2.TrainerSpec.ModelType.Name(proto.trainer_spec.model_type)

  def to_hf_tokenizer(self):
    """A `tokenizers.Tokenizer` (Unigram) that encodes as this one does, for export.

    Sentencepiece's normalization (its precompiled nmt_nfkc map, whitespace stripped and
    collapsed, ▁ for spaces and before the text) is rebuilt from tokenizers' normalizers;
    the special tokens are added tokens, cut out before the rest is normalized. Pieces
    of equal total score (to float32 rounding) can be split either way: rare (see
    README).
    """
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(self.model_proto)
    if proto.trainer_spec.model_type != sentencepiece_model_pb2.TrainerSpec.UNIGRAM:
      raise UserError(f'the vocabulary is a sentencepiece {self.model_type()} model; only '
                      'unigram vocabularies (data.vocab_model_type=unigram, the default) '
                      'export to a Hugging Face tokenizer')
    spec = proto.normalizer_spec
    if not (spec.add_dummy_prefix and spec.remove_extra_whitespaces):
      raise UserError('the sentencepiece vocabulary was not made with sharedbert\'s '
                      'normalization (add_dummy_prefix, remove_extra_whitespaces)')
    tok = HfTokenizer(models.Unigram([(p.piece, p.score) for p in proto.pieces], unk_id=UNK_ID,
                                     byte_fallback=False))
    steps = [normalizers.Precompiled(spec.precompiled_charsmap)] if spec.precompiled_charsmap else []
    tok.normalizer = normalizers.Sequence(steps + [
        normalizers.Strip(), normalizers.Replace(Regex(' {2,}'), ' '),
        normalizers.Prepend('\u2581'), normalizers.Replace(' ', '\u2581')])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement='\u2581', prepend_scheme='never',
                                                 split=True)
    tok.decoder = decoders.Metaspace(replacement='\u2581', prepend_scheme='always', split=True)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in _SP_SPECIALS])
    _bert_post_processor(tok, self)
    return tok


# ---------------------------------------------------------------------------------------
# WordPiece.

class WordPieceTokenizer(Tokenizer):
  """A BERT vocab.txt, tokenized by the `tokenizers` library as BertTokenizer does."""
  kind = 'wordpiece'

  def __init__(self, vocab: Sequence[str], *, lowercase: bool = True,
               strip_accents: bool | None = None, tokenize_chinese_chars: bool = True,
               special: dict[str, str] | None = None, source: str = WORDPIECE_FILE):
    self.vocab = list(vocab)
    self.lowercase, self.strip_accents = bool(lowercase), strip_accents
    self.tokenize_chinese_chars = bool(tokenize_chinese_chars)
    index = {}
    for i, token in enumerate(self.vocab):
      index.setdefault(token, i)  # A duplicate line: BertTokenizer keeps the last; rare.
    special = {**_BERT_SPECIALS, **(special or {})}
    for name in SPECIAL_NAMES:
      if special[name] not in index:
        raise UserError(f'{source} has no {special[name]} token ({name}_token); a BERT '
                        'WordPiece vocabulary needs [PAD], [UNK], [CLS], [SEP] and [MASK]')
      setattr(self, f'{name}_id', index[special[name]])
    if self.pad_id != 0:
      raise UserError(f'{source} has {special["pad"]} at id {self.pad_id}; sharedbert needs the '
                      'padding token at id 0 (as in every BERT vocabulary)')
    self.special = special
    tok = HfTokenizer(models.WordPiece(vocab=index, unk_token=special['unk'],
                                       max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=self.tokenize_chinese_chars,
        strip_accents=strip_accents, lowercase=self.lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix='##')
    tok.add_special_tokens([special[n] for n in SPECIAL_NAMES])
    self.tok = tok

  @property
  def vocab_size(self) -> int:
    return len(self.vocab)

  def encode(self, texts: Sequence[str], num_threads: int = 0) -> list[list[int]]:
    return [e.ids for e in self.tok.encode_batch(list(texts), add_special_tokens=False)]

  def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """(ids, (start, end) character offsets of each id in `text`), without special tokens."""
    e = self.tok.encode(text, add_special_tokens=False)
    return list(e.ids), [tuple(o) for o in e.offsets]

  def decode(self, ids: Iterable[int]) -> str:
    drop = {self.pad_id, self.cls_id, self.sep_id, self.mask_id}
    return self.tok.decode([int(i) for i in ids if int(i) not in drop],
                           skip_special_tokens=False)

  def id_to_piece(self, i: int) -> str:
    return self.vocab[int(i)]

  def token_text(self, i: int) -> str:
    return self.tok.decode([int(i)], skip_special_tokens=False)

  def text_of(self, ids: Sequence[int]) -> str:
    drop = {self.pad_id, self.cls_id, self.sep_id}
    return self.tok.decode([int(i) for i in ids if int(i) not in drop],
                           skip_special_tokens=False)

  def config(self) -> dict:
    """tokenizer_config.json as Hugging Face's BertTokenizer writes and reads it."""
    return {'tokenizer_class': 'BertTokenizer', 'do_lower_case': self.lowercase,
            'strip_accents': self.strip_accents,
            'tokenize_chinese_chars': self.tokenize_chinese_chars,
            **{f'{n}_token': self.special[n] for n in SPECIAL_NAMES}}

  def save(self, workdir: str):
    _write_atomic(os.path.join(workdir, WORDPIECE_FILE),
                  ''.join(t + '\n' for t in self.vocab).encode('utf-8'))
    _write_atomic(os.path.join(workdir, WORDPIECE_CONFIG),
                  (json.dumps(self.config(), indent=2) + '\n').encode('utf-8'))

  def to_hf_tokenizer(self):
    """The `tokenizers.Tokenizer` behind this one, with BERT's [CLS] ... [SEP] template."""
    tok = HfTokenizer.from_str(self.tok.to_str())
    _bert_post_processor(tok, self)
    return tok


_BERT_SPECIALS = {'pad': '[PAD]', 'unk': '[UNK]', 'cls': '[CLS]', 'sep': '[SEP]',
                  'mask': '[MASK]'}


def _bert_post_processor(tok, ours: Tokenizer):
  cls, sep = ours.id_to_piece(ours.cls_id), ours.id_to_piece(ours.sep_id)
  tok.post_processor = processors.TemplateProcessing(
      single=f'{cls} $A {sep}', pair=f'{cls} $A {sep} $B:1 {sep}:1',
      special_tokens=[(cls, ours.cls_id), (sep, ours.sep_id)])


def read_wordpiece(directory: str) -> WordPieceTokenizer:
  """The vocab.txt (+ tokenizer_config.json) of a Hugging Face or sharedbert directory.

  Args:
    directory: the folder.
  Returns:
    The WordPieceTokenizer.
  """
  path = os.path.join(directory, WORDPIECE_FILE)
  if not paths.gfile().exists(path):
    raise UserError(f'{path} not found')
  with paths.gfile().GFile(path, 'rb') as f:
    try:
      text = f.read().decode('utf-8')
    except UnicodeDecodeError as e:
      raise UserError(f'{path} is not UTF-8 text ({e})') from None
  vocab = [line.rstrip('\r') for line in text.split('\n')]
  if vocab and vocab[-1] == '':
    vocab.pop()
  settings = {}
  config_path = os.path.join(directory, WORDPIECE_CONFIG)
  if paths.gfile().exists(config_path):
    with paths.gfile().GFile(config_path) as f:
      try:
        settings = json.load(f)
      except json.JSONDecodeError as e:
        raise UserError(f'{config_path} is not valid JSON ({e})') from None
  cls = settings.get('tokenizer_class') or 'BertTokenizer'
  if cls.replace('Fast', '') not in ('BertTokenizer', 'DistilBertTokenizer',
                                     'PreTrainedTokenizer'):
    raise UserError(f'{config_path}: tokenizer_class {cls!r} is not supported; sharedbert '
                    'reads BERT WordPiece vocabularies (BertTokenizer)')
  special = {}
  for name in SPECIAL_NAMES:
    value = settings.get(f'{name}_token')
    if isinstance(value, dict):  # AddedToken, as older transformers wrote it.
      value = value.get('content')
    if isinstance(value, str):
      special[name] = value
  strip_accents = settings.get('strip_accents')
  return WordPieceTokenizer(
      vocab, lowercase=bool(settings.get('do_lower_case', True)),
      strip_accents=None if strip_accents is None else bool(strip_accents),
      tokenize_chinese_chars=bool(settings.get('tokenize_chinese_chars', True)),
      special=special, source=path)


# ---------------------------------------------------------------------------------------
# Files.

def train(documents: Iterable[str], vocab_size: int, *, model_type: str = 'unigram',
          max_sentences: int = 2_000_000) -> SentencePieceTokenizer:
  """Learns a sentencepiece vocabulary.

  Args:
    documents: the texts to learn from.
    vocab_size: at most this many pieces, special tokens included (fewer if the text is
      small).
    model_type: sentencepiece's model type (data.vocab_model_type; sharedbert reads
      'unigram' vocabularies back).
    max_sentences: how many lines sentencepiece samples.
  Returns:
    The SentencePieceTokenizer.
  """
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
  return SentencePieceTokenizer(model.getvalue())


def _train_sentencepiece(documents, model, vocab_size, model_type, max_sentences):
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(documents), model_writer=model, vocab_size=vocab_size,
      model_type=model_type, pad_id=PAD_ID, unk_id=UNK_ID, bos_id=-1, eos_id=-1,
      pad_piece='[PAD]', user_defined_symbols=['[CLS]', '[SEP]', '[MASK]'],
      hard_vocab_limit=False, character_coverage=0.9995, input_sentence_size=max_sentences,
      shuffle_input_sentence=True, max_sentence_length=1 << 16, num_threads=os.cpu_count() or 1,
      minloglevel=2)


def load(path: str) -> SentencePieceTokenizer:
  """The sentencepiece vocabulary at `path`.

  Args:
    path: a vocab.model (local or gs://).
  Returns:
    The SentencePieceTokenizer.
  Raises:
    UserError: a damaged file (empty, truncated, not a sentencepiece model), named.
  """
  with paths.gfile().GFile(path, 'rb') as f:
    data = f.read()
  if not data:
    raise UserError(f'the vocabulary {path} is empty; restore it from a copy of the run (its '
                    'checkpoints need the same vocabulary) or start a new workdir')
  try:
    return SentencePieceTokenizer(data)
  except UserError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    # sentencepiece says RuntimeError ('Internal: ... ParseFromArray') for any broken proto.
    raise UserError(f'the vocabulary {path} is damaged and does not load as a sentencepiece '
                    f'model ({str(e).strip().splitlines()[0][:120]}); restore it from a copy '
                    'of the run (its checkpoints need the same vocabulary) or start a new '
                    'workdir') from None


def _write_atomic(path: str, data: bytes):
  tmp = path + '.tmp'
  with paths.gfile().GFile(tmp, 'wb') as f:
    f.write(data)
  paths.gfile().rename(tmp, path, overwrite=True)  # Never a half-written vocabulary.


def save(tokenizer: SentencePieceTokenizer, path: str):
  """Writes the sentencepiece model of `tokenizer` to `path` (atomically).

  Args:
    tokenizer: the vocabulary.
    path: the vocab.model to write.
  Returns:
    None.
  """
  _write_atomic(path, tokenizer.model_proto)


def vocab_kind(workdir: str) -> str | None:
  """'sentencepiece' (vocab.model), 'wordpiece' (vocab.txt) or None.

  Args:
    workdir: a folder.
  Returns:
    The kind, or None.
  """
  has_sp = paths.gfile().exists(os.path.join(workdir, VOCAB_FILE))
  has_wp = paths.gfile().exists(os.path.join(workdir, WORDPIECE_FILE))
  if has_sp and has_wp:
    raise UserError(f'{workdir} holds both {VOCAB_FILE} and {WORDPIECE_FILE}; keep the one '
                    'whose ids match the checkpoint\'s embeddings')
  return 'sentencepiece' if has_sp else 'wordpiece' if has_wp else None


def load_workdir(workdir: str) -> Tokenizer | None:
  """The vocabulary a workdir holds.

  Args:
    workdir: a pretraining workdir, an import or a fine-tuned seed directory.
  Returns:
    Its tokenizer (vocab.model, or vocab.txt with tokenizer_config.json), or None.
  """
  kind = vocab_kind(workdir)
  if kind == 'sentencepiece':
    return load(os.path.join(workdir, VOCAB_FILE))
  if kind == 'wordpiece':
    return read_wordpiece(workdir)
  return None


def copy_vocab(source: str, target: str) -> list[str]:
  """Copies a workdir's vocabulary file(s) to another directory; returns their names.

  Args:
    source: the workdir holding it.
    target: the folder to copy into.
  Returns:
    The names copied.
  """
  copied = []
  for name in VOCAB_FILES:
    if paths.gfile().exists(os.path.join(source, name)):
      paths.gfile().copy(os.path.join(source, name), os.path.join(target, name), overwrite=True)
      copied.append(name)
  return copied
