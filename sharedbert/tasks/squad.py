"""SQuAD v1.1 and v2.0: span-extraction fine-tuning and the official evaluation.

Data: the official JSON files (train-v1.1.json, dev-v1.1.json, train-v2.0.json,
dev-v2.0.json) from a folder, or tfds `squad/v1.1` / `squad/v2.0` (`read_examples`).

Features (`featurize`): [CLS] question [SEP] context-window [SEP], the question cut to
`max_query_len` tokens; a context longer than the window is split into windows that start
every `doc_stride` tokens (BERT's run_squad). Sentencepiece gives each context token its
character span, so answers map to token positions exactly and predicted spans are cut from
the original context. A training answer outside a window, and a v2 question without an
answer, point at [CLS] (position 0).

Model (`BertForQuestionAnswering`): the encoder plus one dense layer giving a start and an
end logit per token.

Decoding (`decode`): per question, over all its windows, the best span (start <= end,
both in the context, at most `max_answer_len` tokens, the start token in the window where
it has the most context: BERT's `_check_is_max_context`) by start + end logit among the
`n_best` highest starts and ends. v2: the no-answer score is the lowest [CLS] start + end
logit over the question's windows; the question gets no answer when that score minus the
best span's exceeds a threshold, chosen on dev to maximise F1 (metrics/squad.py's
`best_threshold`, the official script's procedure; reported beside the threshold-0 figures).

Metrics: the official scripts' (sharedbert/metrics/squad.py).

Fine-tuning: `SquadTask` is SQuAD as a Task (tasks/task.py); the task runner
(tasks/runner.py) trains and scores it, as it does any task.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
from typing import Optional, Sequence

import numpy as np
import flax.linen as nn
import jax.numpy as jnp
import ml_collections
import optax

from sharedbert.errors import UserError
from sharedbert import optim as optim_lib
from sharedbert.metrics import squad as squad_metrics
from sharedbert.models import bert
from sharedbert.tasks import engine
from sharedbert.tasks import runner
from sharedbert.tasks import task as task_lib
from sharedbert.utils import jsonio


# ---------------------------------------------------------------------------------------
# Examples.

@dataclasses.dataclass(frozen=True)
class SquadExample:
  """One question with its context, its answers' texts and starts (none for an unanswerable
  one)."""
  qid: str
  question: str
  context: str
  answers: tuple[str, ...]          # Gold answer texts (v2 unanswerable: empty).
  answer_starts: tuple[int, ...]    # Their character offsets in the context.
  is_impossible: bool = False


def _file_name(version: str, split: str) -> str:
  return f'{"train" if split == "train" else "dev"}-v{version}.json'


def _exists(path: str) -> bool:
  import tensorflow as tf
  return tf.io.gfile.exists(path)


def read_json_file(path: str) -> list[SquadExample]:
  """Examples of an official SQuAD JSON file (v1.1 or v2.0).

  Args:
    path: the file.
  Returns:
    The examples.
  """
  import tensorflow as tf
  try:
    with tf.io.gfile.GFile(path) as f:  # Local or remote (gs://).
      data = json.load(f)['data']
  except (OSError, tf.errors.OpError, ValueError, KeyError) as e:
    raise UserError(f'cannot read the SQuAD file {path}: {e}') from None
  out = []
  for article in data:
    for paragraph in article['paragraphs']:
      context = paragraph['context']
      for qa in paragraph['qas']:
        answers = qa.get('answers', [])
        out.append(SquadExample(
            qid=qa['id'], question=qa['question'], context=context,
            answers=tuple(a['text'] for a in answers),
            answer_starts=tuple(int(a['answer_start']) for a in answers),
            is_impossible=bool(qa.get('is_impossible', False))))
  return out


def read_tfds(version: str, split: str, data_dir: Optional[str]) -> list[SquadExample]:
  """The examples of tfds `squad/v<version>` `split` (prepared under `data_dir`).

  Args:
    version: '1.1' or '2.0'.
    split: 'train' or 'validation'.
    data_dir: where it is prepared.
  Returns:
    The examples.
  """
  import tensorflow_datasets as tfds
  name = f'squad/v{version}'
  try:
    ds = tfds.builder(name, data_dir=data_dir or None).as_dataset(split=split)
  except Exception as e:  # Not prepared: tfds raises several kinds of errors.
    raise UserError(f'tfds {name} is not prepared in {data_dir or "the default data dir"} '
                    f'({type(e).__name__}); run `tfds build {name}` with network access, or '
                    'set squad.data_dir to a folder with the official JSON files') from None
  out = []
  for ex in tfds.as_numpy(ds):
    texts = tuple(t.decode('utf-8') for t in ex['answers']['text'])
    starts = tuple(int(s) for s in ex['answers']['answer_start'])
    impossible = bool(ex.get('is_impossible', not texts))
    out.append(SquadExample(ex['id'].decode('utf-8'), ex['question'].decode('utf-8'),
                            ex['context'].decode('utf-8'), () if impossible else texts,
                            () if impossible else starts, impossible))
  return out


def read_examples(version: str, split: str, *, data_dir: str = '',
                  tfds_data_dir: str = '') -> list[SquadExample]:
  """split: 'train' or 'validation'. A data_dir with the official files wins over tfds.

  Args:
    version: '1.1' or '2.0'.
    split: as above.
    data_dir: a folder with the official JSON files, or ''.
    tfds_data_dir: where tfds squad is prepared.
  Returns:
    The examples.
  """
  if version not in ('1.1', '2.0'):
    raise UserError(f'unknown SQuAD version {version!r}; use 1.1 or 2.0')
  if data_dir:
    path = os.path.join(data_dir, _file_name(version, split))
    if not _exists(path):
      raise UserError(f'{path} not found; squad.data_dir must hold the official '
                      f'{_file_name(version, "train")} and {_file_name(version, "validation")}')
    return read_json_file(path)
  return read_tfds(version, split, tfds_data_dir)


# ---------------------------------------------------------------------------------------
# Tokens with character spans, and windowed features.

def tokenize_with_spans(tokenizer, text: str) -> tuple[list[int], list[tuple[int, int]]]:
  """Token ids and each token's (start, end) character span in `text`, whitespace excluded.

  Args:
    tokenizer: the vocabulary.
    text: the context.
  Returns:
    (ids, spans).
  """
  if not hasattr(tokenizer, 'sp'):  # WordPiece: the tokenizers library gives the offsets.
    return tokenizer.encode_with_offsets(text)
  proto = tokenizer.sp.encode(text, out_type='proto')
  raw = text.encode('utf-8')
  # Byte offset -> character offset.
  char_of_byte = np.zeros(len(raw) + 1, np.int64)
  pos = 0
  for i, ch in enumerate(text):
    n = len(ch.encode('utf-8'))
    char_of_byte[pos:pos + n] = i
    pos += n
  char_of_byte[pos] = len(text)
  ids, spans = [], []
  for piece in proto.pieces:
    start, end = int(char_of_byte[piece.begin]), int(char_of_byte[piece.end])
    while start < end and text[start].isspace():
      start += 1
    if start == end and piece.begin == piece.end:
      start = end = int(char_of_byte[piece.begin])
    ids.append(int(piece.id))
    spans.append((start, end))
  return ids, spans


@dataclasses.dataclass
class Features:
  """The windows of the examples as model inputs: ids, segments, token-to-context maps and
  answer spans."""
  input_ids: np.ndarray        # [F, T]
  segment_ids: np.ndarray      # [F, T]
  start_positions: np.ndarray  # [F] (0 = [CLS]: no answer in this window)
  end_positions: np.ndarray    # [F]
  example_index: np.ndarray    # [F] the feature's question
  token_spans: list            # per feature: {token position: (char start, char end)}
  max_context: list            # per feature: {token position: bool}

  def __len__(self):
    return len(self.example_index)


def _windows(num_tokens: int, window: int, stride: int) -> list[tuple[int, int]]:
  """(start, length) of the context windows, as BERT's run_squad."""
  spans, start = [], 0
  while True:
    length = min(window, num_tokens - start)
    spans.append((start, length))
    if start + length >= num_tokens:
      return spans
    start += min(length, stride)


def _is_max_context(spans: list[tuple[int, int]], index: int, position: int) -> bool:
  """Whether window `index` gives token `position` its most context (BERT's rule)."""
  best, best_index = None, None
  for i, (start, length) in enumerate(spans):
    end = start + length - 1
    if position < start or position > end:
      continue
    score = min(position - start, end - position) + 0.01 * length
    if best is None or score > best:
      best, best_index = score, i
  return best_index == index


def featurize(examples: Sequence[SquadExample], tokenizer, *, seq_len: int, doc_stride: int,
              max_query_len: int, is_training: bool) -> Features:
  """Every example as windows of seq_len tokens ([CLS] question [SEP] context [SEP]),
  doc_stride apart; with is_training, the answer's token span in each.

  Args:
    examples: the examples.
    tokenizer: the vocabulary.
    seq_len: tokens a window.
    doc_stride: tokens between windows' starts.
    max_query_len: the question's tokens, at most.
    is_training: mark the answer's span.
  Returns:
    Features, one row a window.
  """
  CLS_ID, SEP_ID = tokenizer.cls_id, tokenizer.sep_id
  ids_out, segs_out, starts, ends, ex_index, spans_out, maxctx_out = [], [], [], [], [], [], []
  for e_i, ex in enumerate(examples):
    q_ids = tokenizer.encode([ex.question])[0][:max_query_len]
    c_ids, c_spans = tokenize_with_spans(tokenizer, ex.context)
    window = seq_len - len(q_ids) - 3
    if window < 1:
      raise UserError(f'squad.seq_len={seq_len} leaves no room for the context after a '
                      f'{len(q_ids)}-token question; raise seq_len or lower max_query_len')
    tok_start = tok_end = None
    if is_training and ex.answers and not ex.is_impossible:
      a_start = ex.answer_starts[0]
      a_end = a_start + len(ex.answers[0])
      inside = [i for i, (s, e) in enumerate(c_spans) if s < a_end and e > a_start]
      if inside:
        tok_start, tok_end = inside[0], inside[-1]
    windows = _windows(len(c_ids), window, doc_stride)
    for w_i, (w_start, w_len) in enumerate(windows):
      ids = [CLS_ID] + q_ids + [SEP_ID]
      segs = [0] * len(ids)
      offset = len(ids)
      token_spans, max_context = {}, {}
      for j in range(w_len):
        token_spans[offset + j] = c_spans[w_start + j]
        max_context[offset + j] = _is_max_context(windows, w_i, w_start + j)
      ids += c_ids[w_start:w_start + w_len] + [SEP_ID]
      segs += [1] * (w_len + 1)
      start_pos = end_pos = 0
      if tok_start is not None and w_start <= tok_start and tok_end < w_start + w_len:
        start_pos, end_pos = offset + tok_start - w_start, offset + tok_end - w_start
      row = np.zeros(seq_len, np.int32)
      row[:len(ids)] = ids
      seg = np.zeros(seq_len, np.int32)
      seg[:len(segs)] = segs
      ids_out.append(row)
      segs_out.append(seg)
      starts.append(start_pos)
      ends.append(end_pos)
      ex_index.append(e_i)
      spans_out.append(token_spans)
      maxctx_out.append(max_context)
  return Features(np.stack(ids_out), np.stack(segs_out), np.asarray(starts, np.int32),
                  np.asarray(ends, np.int32), np.asarray(ex_index, np.int64), spans_out,
                  maxctx_out)


# ---------------------------------------------------------------------------------------
# Decoding.

def decode(examples: Sequence[SquadExample], features: Features, start_logits: np.ndarray,
           end_logits: np.ndarray, *, n_best: int = 20,
           max_answer_len: int = 30) -> tuple[dict, dict]:
  """(qid -> best non-empty answer text, qid -> no-answer score minus best span score).

  A question with no valid span in any window gets '' and an infinite no-answer margin.

  Args:
    examples: the examples.
    features: their windows.
    start_logits, end_logits: [windows, seq_len].
    n_best: spans considered a window.
    max_answer_len: tokens an answer, at most.
  Returns:
    As above.
  """
  by_example = collections.defaultdict(list)
  for f_i, e_i in enumerate(features.example_index):
    by_example[int(e_i)].append(f_i)
  answers, margins = {}, {}
  for e_i, ex in enumerate(examples):
    best_score, best_span = -np.inf, None
    null_score = np.inf
    for f_i in by_example.get(e_i, []):
      s_log, e_log = start_logits[f_i], end_logits[f_i]
      null_score = min(null_score, float(s_log[0] + e_log[0]))
      spans, maxctx = features.token_spans[f_i], features.max_context[f_i]
      top_starts = np.argsort(-s_log, kind='stable')[:n_best]
      top_ends = np.argsort(-e_log, kind='stable')[:n_best]
      for s in top_starts:
        s = int(s)
        if s not in spans or not maxctx.get(s, False):
          continue
        for e in top_ends:
          e = int(e)
          if e not in spans or e < s or e - s + 1 > max_answer_len:
            continue
          score = float(s_log[s] + e_log[e])
          if score > best_score:
            best_score, best_span = score, (spans[s][0], spans[e][1])
    if best_span is None:
      answers[ex.qid], margins[ex.qid] = '', np.inf
    else:
      answers[ex.qid] = ex.context[best_span[0]:best_span[1]].strip()
      margins[ex.qid] = null_score - best_score
  return answers, margins


# ---------------------------------------------------------------------------------------
# Model and fine-tuning.

def _qa_model_class():

  class BertForQuestionAnswering(nn.Module):
    """The encoder, then one dense layer: a start and an end logit per token."""
    config: bert.ModelConfig

    @nn.compact
    def __call__(self, input_ids, segment_ids, input_mask, *, deterministic: bool = True):
      out = bert.BertEncoder(self.config, name='bert')(input_ids, segment_ids, input_mask,
                                                       deterministic=deterministic)
      logits = bert.dense(self.config, 2, ('embed', None), 'qa_outputs')(
          out['sequence_output']).astype(jnp.float32)
      # Padding can never be a start or an end.
      logits = jnp.where(input_mask[..., None] > 0, logits, -1e9)
      return logits[..., 0], logits[..., 1]

  return BertForQuestionAnswering


def optimizer_config(squad_cfg):
  """The optimizer section of a SQuAD config: its `optim`, or its lr and warmup_fraction
  with BERT's other values (sharedbert.optim.SQUAD_DEFAULTS).

  Args:
    squad_cfg: the study's squad section.
  Returns:
    An optimizer config section.
  """
  if 'optim' in squad_cfg:
    return squad_cfg.optim
  return ml_collections.ConfigDict(dict(optim_lib.SQUAD_DEFAULTS, lr=squad_cfg.lr,
                                        warmup_fraction=squad_cfg.warmup_fraction))


def _span_loss(outputs, batch):
  """The mean over real rows of the start and end positions' cross-entropies."""
  start_logits, end_logits = outputs
  w = batch['weights']
  ls = optax.softmax_cross_entropy_with_integer_labels(start_logits, batch['start'])
  le = optax.softmax_cross_entropy_with_integer_labels(end_logits, batch['end'])
  return jnp.sum((ls + le) / 2 * w) / jnp.maximum(jnp.sum(w), 1.0)


@task_lib.register('squad')
class SquadTask:
  """SQuAD `version` ('1.1' or '2.0') as a Task (tasks/task.py): reading, windows, the span
  head and loss, n-best decoding and the official metrics, with the settings of `squad_cfg`
  (configs/study.py's `squad` section)."""
  name = 'squad'
  bucket = False  # Logits per token: every batch keeps all its columns.

  def __init__(self, squad_cfg, version: str):
    self.config, self.version = squad_cfg, version

  def examples(self):
    """(train, dev) questions, each a fixed random subset when the config caps it."""
    c = self.config
    train = read_examples(self.version, 'train', data_dir=c.data_dir,
                          tfds_data_dir=c.tfds_data_dir)
    dev = read_examples(self.version, 'validation', data_dir=c.data_dir,
                        tfds_data_dir=c.tfds_data_dir)
    rng = np.random.default_rng(0)  # One generator: the dev subset follows the train draw.
    return (engine.subset(train, c.max_train_examples, rng),
            engine.subset(dev, c.max_eval_examples, rng))

  def featurize(self, examples, tokenizer, *, training: bool) -> task_lib.TaskData:
    """The questions' windows (`featurize`), with the answers' positions when training."""
    c = self.config
    f = featurize(examples, tokenizer, is_training=training, seq_len=c.seq_len,
                  doc_stride=c.doc_stride, max_query_len=c.max_query_len)
    arrays = {'input_ids': f.input_ids, 'segment_ids': f.segment_ids}
    if training:
      arrays.update(start=f.start_positions, end=f.end_positions)
    return task_lib.TaskData(arrays, runner.lengths_of(f.input_ids), extra=f)

  def model(self, model_config):
    """The encoder and a start and end logit per token."""
    return _qa_model_class()(model_config)

  def loss(self, outputs, batch):
    """The start and end positions' cross-entropy (`_span_loss`)."""
    return _span_loss(outputs, batch)

  def predictions(self, outputs, data, examples):
    """(answers, margins): the best span of each question, and its no-answer margin."""
    starts, ends = outputs
    return decode(examples, data.extra, starts, ends, n_best=self.config.n_best,
                  max_answer_len=self.config.max_answer_len)

  def metrics(self, predictions, examples) -> dict:
    """The official figures (`evaluate_predictions`)."""
    answers, margins = predictions
    return squad_metrics.evaluate_predictions(examples, answers, margins, self.version)


def finetune_and_evaluate(squad_cfg, *, version: str, init_from: str, seed: int,
                          workdir: str, mesh=None) -> dict:
  """Fine-tunes the encoder of the pretraining run `init_from` on SQuAD `version` and
  scores its dev set, through the task runner (tasks/runner.py).

  Args:
    squad_cfg: the `squad` section (seq_len, doc_stride, batch_size, lr, ...).
    version: '1.1' or '2.0'.
    init_from: the pretraining run's --workdir.
    seed: the fine-tuning seed.
    workdir: where predictions_seed_<seed>.json goes.
    mesh: where the engine runs (default: every device on the data axis).
  Returns:
    The official figures ('metrics') and timings, with the run's sizes.
  """
  c = squad_cfg
  result = runner.fit_and_score(
      SquadTask(c, version), init_from=init_from, optim=optimizer_config(c),
      num_epochs=c.num_epochs, batch_size=c.batch_size, seed=seed, mesh=mesh,
      where='squad.batch_size')
  answers, _ = result.pop('predictions')
  jsonio.write_text(os.path.join(workdir, f'predictions_seed_{seed}.json'), json.dumps(answers))
  return {'version': version, 'seed': seed, **result}
