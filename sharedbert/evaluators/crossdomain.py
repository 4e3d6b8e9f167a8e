"""Cross-domain transfer: fine-tune on one task, score on another with a compatible label space.

Each transfer says how the source model's outputs become the target's labels, and how the
target's gold labels are read (TRANSFERS; `describe` writes it into the report):

  sst2->imdb   sentiment; negative/positive in both (tfds imdb_reviews, test split).
  mrpc->qqp    paraphrase / duplicate question: not-equivalent/equivalent = not-duplicate/duplicate.
  qqp->mrpc    the same mapping, the other way.
  mnli->rte    entailment stays entailment; neutral and contradiction become not_entailment.
  mrpc->stsb   STS-B pairs with a gold similarity >= T (crossdomain.stsb_threshold, default 4.0:
               "mostly equivalent" or better on STS's 0-5 scale) count as paraphrases.
  stsb->mrpc   the regression model's predicted similarity >= T means "equivalent".

Scores are on the target's dev set (IMDB: its test split; tfds has no dev split), with
F1 (positive = paraphrase/duplicate) and accuracy for the paraphrase pairs and accuracy
for the others; `score` is their mean, as GLUE averages MRPC's.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy as np

from sharedbert.data import glue
from sharedbert.errors import UserError
from sharedbert.evaluators import common
from sharedbert.metrics import glue as glue_metrics
from sharedbert.tasks import engine


@dataclasses.dataclass(frozen=True)
class Transfer:
  """A cross-domain transfer: a model fine-tuned on `source` scored on `target` through a
  label mapping."""
  name: str
  source: str                     # The GLUE task the model is fine-tuned on.
  target: str                     # A GLUE task, or 'imdb'.
  target_split: str
  label_names: tuple[str, ...]    # The compared label space (ids 0, 1, ...).
  metric_names: tuple[str, ...]
  mapping: str                    # How labels were mapped, for the report.
  # (source outputs [n, k], threshold) -> label ids; (target gold labels, threshold) -> ids.
  map_prediction: Callable[[np.ndarray, float], np.ndarray]
  map_gold: Callable[[np.ndarray, float], np.ndarray]


def _argmax(logits, threshold):
  del threshold
  return np.argmax(np.asarray(logits), axis=-1).astype(np.int32)


def _identity(labels, threshold):
  del threshold
  return np.asarray(labels).astype(np.int32)


def _mnli_to_binary(logits, threshold):
  # MNLI ids: 0 entailment, 1 neutral, 2 contradiction; RTE: 0 entailment, 1 not_entailment.
  del threshold
  return (np.argmax(np.asarray(logits), axis=-1) != 0).astype(np.int32)


def _similarity_at_least(values, threshold):
  v = np.asarray(values, np.float64)
  if v.ndim == 2:
    v = v[:, 0]
  return (v >= threshold).astype(np.int32)


_PARAPHRASE = ('not_equivalent', 'equivalent')

TRANSFERS: dict[str, Transfer] = {t.name: t for t in [
    Transfer('sst2->imdb', 'sst2', 'imdb', 'test', ('negative', 'positive'), ('accuracy',),
             'SST-2 negative/positive = IMDB negative/positive (tfds imdb_reviews ids)',
             _argmax, _identity),
    Transfer('mrpc->qqp', 'mrpc', 'qqp', 'validation', _PARAPHRASE, ('f1', 'accuracy'),
             'MRPC equivalent = QQP duplicate, not_equivalent = not_duplicate', _argmax,
             _identity),
    Transfer('qqp->mrpc', 'qqp', 'mrpc', 'validation', _PARAPHRASE, ('f1', 'accuracy'),
             'QQP duplicate = MRPC equivalent, not_duplicate = not_equivalent', _argmax,
             _identity),
    Transfer('mnli->rte', 'mnli', 'rte', 'validation', ('entailment', 'not_entailment'),
             ('accuracy',),
             'MNLI entailment = RTE entailment; MNLI neutral and contradiction = RTE '
             'not_entailment', _mnli_to_binary, _identity),
    Transfer('mrpc->stsb', 'mrpc', 'stsb', 'validation', _PARAPHRASE, ('f1', 'accuracy'),
             'MRPC prediction against STS-B gold similarity >= {threshold:g} (of 0-5) as '
             '"equivalent"', _argmax, _similarity_at_least),
    Transfer('stsb->mrpc', 'stsb', 'mrpc', 'validation', _PARAPHRASE, ('f1', 'accuracy'),
             'STS-B predicted similarity >= {threshold:g} as "equivalent", against MRPC gold',
             _similarity_at_least, _identity),
]}


def get_transfer(name: str) -> Transfer:
  """'mrpc->stsb', forgiving case and GLUE's spelling ('MRPC->STS-B').

  Args:
    name: 'source->target'.
  Returns:
    The Transfer.
  Raises:
    UserError: an unknown transfer, naming the known ones.
  """
  def canonical(task):
    task = task.strip().lower()
    if task == 'imdb':
      return task
    try:
      return glue.get_task(task).name
    except UserError:
      return task
  key = '->'.join(canonical(t) for t in name.split('->'))
  if key not in TRANSFERS:
    raise UserError(f'unknown cross-domain pair {name!r} (config.crossdomain.pairs); choose '
                    f'from {", ".join(TRANSFERS)}')
  return TRANSFERS[key]


def describe(transfer: Transfer, threshold: float) -> str:
  """The transfer's label mapping in words, with its STS-B threshold.

  Args:
    transfer: the Transfer.
    threshold: STS-B's score threshold.
  Returns:
    The text.
  """
  return transfer.mapping.format(threshold=threshold)


def load_target_examples(transfer: Transfer, *, glue_dir: Optional[str],
                         tfds_data_dir: Optional[str], max_examples: int = 0) -> list:
  """The target's evaluation examples (sharedbert.data.glue.Example), labels as read.

  Args:
    transfer: the Transfer.
    glue_dir: a glue_data folder, or None.
    tfds_data_dir: where tfds datasets are prepared.
    max_examples: a fixed subset's size (0: all).
  Returns:
    The Examples.
  """
  if transfer.target == 'imdb':
    examples = read_imdb(transfer.target_split, tfds_data_dir, max_examples)
  else:
    examples = glue.load_examples(transfer.target, transfer.target_split,
                                  glue_dir=glue_dir or None, tfds_data_dir=tfds_data_dir or None)
    examples = _subset(examples, max_examples)
  if not examples or any(ex.label is None for ex in examples):
    raise UserError(f'cross-domain {transfer.name}: the target split {transfer.target_split} '
                    'is empty or unlabeled')
  return examples


def read_imdb(split: str, tfds_data_dir: Optional[str], max_examples: int = 0) -> list:
  """tfds imdb_reviews/plain_text as Examples (label 0 negative, 1 positive).

  Args:
    split: a tfds split.
    tfds_data_dir: where it is prepared.
    max_examples: a fixed subset's size (0: all).
  Returns:
    The Examples.
  """
  import tensorflow_datasets as tfds
  try:
    builder = tfds.builder('imdb_reviews/plain_text', data_dir=tfds_data_dir or None)
    ds = builder.as_dataset(split=split)
  except Exception as e:  # Not prepared: tfds raises several kinds of errors.
    raise UserError(f'tfds imdb_reviews is not prepared in {tfds_data_dir or "the default data dir"} '
                    f'({type(e).__name__}); run `tfds build imdb_reviews` on a machine with '
                    'network access, or drop sst2->imdb from config.crossdomain.pairs') from None
  out = []
  for i, ex in enumerate(tfds.as_numpy(ds)):
    out.append(glue.Example(guid=i, text_a=ex['text'].decode('utf-8'), text_b=None,
                            label=int(ex['label'])))
  return _subset(out, max_examples)


def _subset(examples, max_examples: int):
  return engine.subset(examples, max_examples)


def score(transfer: Transfer, source_outputs: np.ndarray, target_labels: np.ndarray,
          threshold: float) -> dict:
  """Metrics of the mapped predictions against the mapped gold labels (fractions).

  Args:
    transfer: the Transfer.
    source_outputs: [n, ...] the source classifier's outputs on the target's examples.
    target_labels: [n] the target's gold labels.
    threshold: STS-B's score threshold.
  Returns:
    {metric: value}.
  """
  preds = transfer.map_prediction(source_outputs, threshold)
  gold = transfer.map_gold(target_labels, threshold)
  metrics = {n: float(glue_metrics.metric_fn(n)(preds, gold)) for n in transfer.metric_names}
  majority = int(np.bincount(gold, minlength=len(transfer.label_names)).argmax())
  constant = np.full_like(gold, majority)
  baseline = {n: float(glue_metrics.metric_fn(n)(constant, gold)) for n in transfer.metric_names}
  return {'metrics': metrics, 'score': float(np.mean(list(metrics.values()))),
          'majority_score': float(np.mean(list(baseline.values()))),
          'n': int(len(gold)), 'positive_rate': float(np.mean(gold == 1)),
          'predicted_positive_rate': float(np.mean(preds == 1))}


@common.register('crossdomain')
class CrossDomain:
  """A task run's classifier scored on the targets of `pairs` ('source->target') whose
  source is its task, each target tokenized as the source task's inputs, with the label
  mapping of TRANSFERS; {} when none has this source."""

  def __init__(self, run, *, pairs: tuple[str, ...] = (), glue_dir: str = '',
               tfds_data_dir: str = '', max_target_examples: int = 0,
               stsb_threshold: float = 4.0):
    self.threshold = float(stsb_threshold)
    self.predict = run.predict
    self.transfers = []
    for pair in pairs:
      t = get_transfer(pair)
      if t.source != run.spec.name:
        continue
      examples = load_target_examples(t, glue_dir=glue_dir or None,
                                      tfds_data_dir=tfds_data_dir or None,
                                      max_examples=int(max_target_examples))
      labels = np.asarray([ex.label for ex in examples], np.float64)
      self.transfers.append((t, run.featurize(examples), labels))

  def run(self, params) -> dict:
    """{transfer name: `score` of the classifier at `params`, with its label mapping}."""
    out = {}
    for t, feats, labels in self.transfers:
      entry = score(t, self.predict(params, feats), labels, self.threshold)
      entry['mapping'] = describe(t, self.threshold)
      out[t.name] = entry
    return out
