"""SQuAD's official figures, as evaluate-v1.1.py and evaluate-v2.0.py define them: lower-case,
drop punctuation and the articles a/an/the, collapse whitespace; exact match and token F1,
the best over the gold answers; v2 adds HasAns_* / NoAns_*, an unanswerable question's gold
answer is the empty string, and the no-answer threshold is tuned on dev as the official
script's find_best_thresh does. Figures x100 as the scripts print. An example is anything
with `qid` and `answers` (sharedbert.tasks.squad.SquadExample)."""

from __future__ import annotations

import collections
import re
import string
from typing import Optional, Sequence

import numpy as np


def normalize_answer(s: str) -> str:
  """Lower text and remove punctuation, articles and extra whitespace (official scripts).

  Args:
    s: an answer.
  Returns:
    The normalised text.
  """
  s = s.lower()
  exclude = set(string.punctuation)
  s = ''.join(ch for ch in s if ch not in exclude)
  s = re.sub(r'\b(a|an|the)\b', ' ', s, flags=re.UNICODE)
  return ' '.join(s.split())


def exact_match(prediction: str, gold: str) -> float:
  """1.0 when the answers are equal after SQuAD's normalisation, else 0.0.

  Args:
    prediction, gold: answers.
  Returns:
    1.0 or 0.0.
  """
  return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str, version: str = '1.1') -> float:
  """Token F1 after normalisation. v2.0: two empty answers score 1, one empty scores 0
  (evaluate-v2.0.py); v1.1 scores 0 whenever nothing is shared (evaluate-v1.1.py).

  Args:
    prediction, gold: answers.
    version: '1.1' or '2.0'.
  Returns:
    F1 in [0, 1].
  """
  pred_tokens = normalize_answer(prediction).split()
  gold_tokens = normalize_answer(gold).split()
  if version == '2.0' and (not pred_tokens or not gold_tokens):
    return float(pred_tokens == gold_tokens)
  common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
  num_same = sum(common.values())
  if num_same == 0:
    return 0.0
  precision = num_same / len(pred_tokens)
  recall = num_same / len(gold_tokens)
  return 2 * precision * recall / (precision + recall)


def gold_answers(answers: Sequence[str], version: str) -> list[str]:
  """v2.0 drops answers that normalise to nothing; no answer at all means [''].

  Args:
    answers: the gold answers.
    version: '1.1' or '2.0'.
  Returns:
    The answers scored against.
  """
  if version == '1.1':
    return list(answers)
  kept = [a for a in answers if normalize_answer(a)]
  return kept or ['']


def score_question(prediction: str, answers: Sequence[str], version: str) -> tuple[float, float]:
  """(exact, f1) of one prediction: the best over the gold answers.

  Args:
    prediction: the answer.
    answers: the gold answers.
    version: '1.1' or '2.0'.
  Returns:
    (exact, f1).
  """
  golds = gold_answers(answers, version)
  return (max(exact_match(prediction, g) for g in golds),
          max(f1(prediction, g, version) for g in golds))


def best_threshold(predictions: dict, raw_scores: dict, no_answer_scores: dict,
                   has_answer: dict) -> tuple[float, float]:
  """The no-answer threshold that maximises a metric, as evaluate-v2.0.py's find_best_thresh.

  predictions: qid -> best non-empty answer; raw_scores: qid -> its exact or F1 (0/1 or
  [0, 1]); no_answer_scores: qid -> how strongly "no answer" is predicted (higher: more);
  a question gets no answer when its no-answer score > threshold. Returns (best metric in
  percent, threshold).

  Args:
    predictions, raw_scores, no_answer_scores: as above.
    has_answer: qid -> whether it has a gold answer.
  Returns:
    As above.
  """
  num_no_answer = sum(1 for q in raw_scores if not has_answer[q])
  current = best = float(num_no_answer)
  threshold = 0.0
  for qid in sorted(no_answer_scores, key=lambda q: no_answer_scores[q]):
    if qid not in raw_scores:
      continue
    if has_answer[qid]:
      diff = raw_scores[qid]
    else:
      diff = -1.0 if predictions[qid] else 0.0
    current += diff
    if current > best:
      best = current
      threshold = no_answer_scores[qid]
  return 100.0 * best / len(raw_scores), threshold


def evaluate(examples: Sequence, predictions: dict, version: str,
             no_answer_scores: Optional[dict] = None) -> dict:
  """The official figures: exact and f1 (x100); v2 also HasAns_* / NoAns_* and, given
  no-answer scores, best_exact / best_f1 and their thresholds.

  predictions: qid -> answer text ('' = no answer).

  Args:
    examples: the dev examples.
    predictions: as above.
    version: '1.1' or '2.0'.
    no_answer_scores: qid -> no-answer score, or None.
  Returns:
    The figures.
  """
  missing = [ex.qid for ex in examples if ex.qid not in predictions]
  if missing:
    raise ValueError(f'no prediction for {len(missing)} questions, e.g. {missing[:3]}')
  exact, f1s, has = {}, {}, {}
  for ex in examples:
    exact[ex.qid], f1s[ex.qid] = score_question(predictions[ex.qid], ex.answers, version)
    has[ex.qid] = bool(gold_answers(ex.answers, version) != [''])
  n = len(examples)
  out = {'exact': 100.0 * sum(exact.values()) / n, 'f1': 100.0 * sum(f1s.values()) / n,
         'total': n}
  if version == '2.0':
    for name, keep in (('HasAns', True), ('NoAns', False)):
      qids = [q for q in exact if has[q] == keep]
      if qids:
        out[f'{name}_exact'] = 100.0 * sum(exact[q] for q in qids) / len(qids)
        out[f'{name}_f1'] = 100.0 * sum(f1s[q] for q in qids) / len(qids)
        out[f'{name}_total'] = len(qids)
  return out


def apply_threshold(answers: dict, margins: dict, threshold: float) -> dict:
  """v2: no answer where the no-answer margin exceeds the threshold.

  Args:
    answers: qid -> best non-empty answer.
    margins: qid -> no-answer margin.
    threshold: the margin above which no answer is given.
  Returns:
    qid -> answer ('' for none).
  """
  return {q: ('' if margins[q] > threshold else a) for q, a in answers.items()}


def evaluate_predictions(examples, answers: dict, margins: dict, version: str) -> dict:
  """v1.1: the official figures. v2.0: at threshold 0, and with the dev-tuned threshold
  (best_f1_threshold applied: exact, f1, HasAns_*, NoAns_* under 'tuned').

  Args:
    examples: the dev examples.
    answers, margins: decode's.
    version: '1.1' or '2.0'.
  Returns:
    The figures.
  """
  if version == '1.1':
    return evaluate(examples, answers, version)
  out = evaluate(examples, apply_threshold(answers, margins, 0.0), version)
  has = {ex.qid: gold_answers(ex.answers, version) != [''] for ex in examples}
  raw = {ex.qid: score_question(answers[ex.qid], ex.answers, version) for ex in examples}
  finite = {q: (m if np.isfinite(m) else 1e30) for q, m in margins.items()}
  best_exact, exact_t = best_threshold(answers, {q: r[0] for q, r in raw.items()}, finite, has)
  best_f1, f1_t = best_threshold(answers, {q: r[1] for q, r in raw.items()}, finite, has)
  out.update(best_exact=best_exact, best_exact_thresh=exact_t, best_f1=best_f1,
             best_f1_thresh=f1_t)
  out['tuned'] = evaluate(examples, apply_threshold(answers, margins, f1_t), version)
  return out
