"""SQuAD: the official metrics on hand-worked cases, windowed features, span decoding."""

import json
import os
import random

import numpy as np
import pytest

from sharedbert import sharding
from sharedbert.metrics import squad as squad_metrics
from sharedbert.tasks import squad
from sharedbert.models.params import load_config_file
from sharedbert.data import tokenizer as tokenizer_lib
import test_finetune
from test_finetune import pretrained  # noqa: F401  (a fixture: 2 steps of a 1-layer model)


# ---------------------------------------------------------------------------------------
# Metrics, worked by hand.

def test_normalize_answer():
  assert squad_metrics.normalize_answer('The  Quick, brown fox!') == 'quick brown fox'
  assert squad_metrics.normalize_answer('An apple a day') == 'apple day'
  # Articles only as whole words; punctuation removed before articles are matched.
  assert squad_metrics.normalize_answer('theater at-the end') == 'theater atthe end'
  assert squad_metrics.normalize_answer('  ') == ''


def test_exact_and_f1_single_gold():
  assert squad_metrics.exact_match('the Denver Broncos', 'Denver Broncos!') == 1.0
  # pred [cat, sat], gold [cat, sat, on, mat]: p = 1, r = 1/2, F1 = 2/3.
  assert squad_metrics.f1('the cat sat', 'cat sat on a mat') == pytest.approx(2 / 3)
  # Repeated tokens count with multiplicity: pred [a1 a1 b], gold [a1 b b] -> common {a1, b}.
  assert squad_metrics.f1('x x y', 'x y y') == pytest.approx(2 / 3)
  assert squad_metrics.f1('nothing shared', 'other words') == 0.0


def test_best_over_multiple_gold_answers():
  golds = ['Denver Broncos', 'Broncos', 'the Broncos']
  assert squad_metrics.score_question('Broncos', golds, '1.1') == (1.0, 1.0)
  # 'broncos team' vs 'denver broncos': F1 1/2; vs 'broncos': p 1/2, r 1 -> 2/3.
  exact, f1 = squad_metrics.score_question('the Broncos team', golds, '1.1')
  assert exact == 0.0 and f1 == pytest.approx(2 / 3)


def test_no_answer_rules_of_each_version():
  # v2.0: no gold answer means the gold is ''; an empty prediction is then right.
  assert squad_metrics.score_question('', [], '2.0') == (1.0, 1.0)
  assert squad_metrics.score_question('Denver', [], '2.0') == (0.0, 0.0)
  # v2.0 drops gold answers that normalise to nothing (here 'the').
  assert squad_metrics.gold_answers(['the', 'Denver'], '2.0') == ['Denver']
  assert squad_metrics.f1('', 'Denver', '2.0') == 0.0
  # v1.1: an empty prediction shares nothing: F1 0 (no special case).
  assert squad_metrics.f1('', '', '1.1') == 0.0
  assert squad_metrics.f1('', '', '2.0') == 1.0


def _ex(qid, answers, context='c'):
  return squad.SquadExample(qid, 'q', context, tuple(answers), tuple(0 for _ in answers),
                            not answers)


def test_evaluate_v1_and_v2_split():
  examples = [_ex('a', ['Denver Broncos']), _ex('b', ['cat sat on a mat']), _ex('c', [])]
  preds = {'a': 'Denver Broncos', 'b': 'the cat sat', 'c': ''}
  v2 = squad_metrics.evaluate(examples, preds, '2.0')
  assert v2['exact'] == pytest.approx(100 * 2 / 3)
  assert v2['f1'] == pytest.approx(100 * (1 + 2 / 3 + 1) / 3)
  assert v2['HasAns_exact'] == pytest.approx(50.0)
  assert v2['HasAns_f1'] == pytest.approx(100 * (1 + 2 / 3) / 2)
  assert v2['NoAns_exact'] == v2['NoAns_f1'] == 100.0
  assert (v2['HasAns_total'], v2['NoAns_total']) == (2, 1)
  v1 = squad_metrics.evaluate(examples[:2], preds, '1.1')
  assert v1['exact'] == 50.0 and 'HasAns_exact' not in v1
  with pytest.raises(ValueError, match='no prediction'):
    squad_metrics.evaluate(examples, {'a': 'x'}, '1.1')


def test_best_threshold_as_the_official_script():
  # a: answerable, best span right (F1 1), no-answer margin -2; b: unanswerable, a span
  # predicted, margin 1; c: answerable, F1 0.5, margin 3. Start: 1 (b right if all empty).
  # Sorted by margin: a +1 -> 2 (best, threshold -2); b -1 -> 1; c +0.5 -> 1.5.
  preds = {'a': 'x', 'b': 'y', 'c': 'z'}
  raw = {'a': 1.0, 'b': 0.0, 'c': 0.5}
  margins = {'a': -2.0, 'b': 1.0, 'c': 3.0}
  has = {'a': True, 'b': False, 'c': True}
  best, threshold = squad_metrics.best_threshold(preds, raw, margins, has)
  assert best == pytest.approx(100 * 2 / 3) and threshold == -2.0
  # Applying it gives that score: a keeps its answer, b and c get none.
  applied = squad_metrics.apply_threshold(preds, margins, threshold)
  assert applied == {'a': 'x', 'b': '', 'c': ''}


# ---------------------------------------------------------------------------------------
# Span decoding on crafted logits.

def _features(spans, max_context=None, example_index=(0,)):
  n = len(example_index)
  return squad.Features(
      input_ids=np.zeros((n, 8), np.int32), segment_ids=np.zeros((n, 8), np.int32),
      start_positions=np.zeros(n, np.int32), end_positions=np.zeros(n, np.int32),
      example_index=np.asarray(example_index), token_spans=spans,
      max_context=max_context or [{k: True for k in s} for s in spans])


def _logits(peaks, n=8, low=-10.0):
  x = np.full(n, low, np.float32)
  for pos, value in peaks.items():
    x[pos] = value
  return x


def test_decode_picks_best_valid_span_and_no_answer_margin():
  context = 'abc def ghi jkl'
  spans = [{3: (0, 3), 4: (4, 7), 5: (8, 11), 6: (12, 15)}]
  ex = [squad.SquadExample('q', 'q?', context, (), ())]
  # Start peaks at 5, end peaks at 4 (invalid: end < start); next best end is 6.
  start = _logits({5: 5.0, 0: 1.0})[None]
  end = _logits({4: 6.0, 6: 4.0, 0: 1.0})[None]
  answers, margins = squad.decode(ex, _features(spans), start, end, n_best=5,
                                  max_answer_len=30)
  assert answers == {'q': 'ghi jkl'}
  assert margins['q'] == pytest.approx((1.0 + 1.0) - (5.0 + 4.0))
  # With max_answer_len=1 only one-token spans count: (4, 4) scores -10 + 6 = -4 and beats
  # (5, 5) at 5 - 10 = -5, if the candidates reach that far (n_best); with 5 they do not.
  answers, _ = squad.decode(ex, _features(spans), start, end, n_best=8, max_answer_len=1)
  assert answers == {'q': 'def'}
  answers, margins = squad.decode(ex, _features(spans), start, end, n_best=5, max_answer_len=1)
  assert answers == {'q': ''} and margins['q'] == np.inf
  # A start token that is not in its max-context window is skipped.
  # Starts: 5 (5.0) then 6 (3.0); end: 6 (4.0). Without 5, (6, 6) is the best span.
  start, end = _logits({5: 5.0, 6: 3.0})[None], _logits({6: 4.0})[None]
  answers, _ = squad.decode(ex, _features(spans), start, end, n_best=5, max_answer_len=30)
  assert answers == {'q': 'ghi jkl'}
  maxctx = [{3: True, 4: True, 5: False, 6: True}]
  answers, _ = squad.decode(ex, _features(spans, maxctx), start, end, n_best=5,
                            max_answer_len=30)
  assert answers == {'q': 'jkl'}
  # Positions outside the context (question, [CLS]) are never answers.
  start = _logits({1: 9.0, 4: 2.0})[None]
  end = _logits({2: 9.0, 4: 2.0})[None]
  answers, _ = squad.decode(ex, _features(spans), start, end, n_best=5, max_answer_len=30)
  assert answers == {'q': 'def'}


def test_decode_over_windows_uses_lowest_null_score():
  context = 'one two three'
  spans = [{2: (0, 3), 3: (4, 7)}, {2: (4, 7), 3: (8, 13)}]
  ex = [squad.SquadExample('q', 'q?', context, (), ())]
  start = np.stack([_logits({0: 3.0, 2: 1.0}), _logits({0: 0.5, 3: 2.0})])
  end = np.stack([_logits({0: 3.0, 2: 1.0}), _logits({0: 0.5, 3: 2.5})])
  answers, margins = squad.decode(ex, _features(spans, example_index=(0, 0)), start, end)
  assert answers == {'q': 'three'}
  assert margins['q'] == pytest.approx(1.0 - 4.5)  # min null (0.5+0.5) minus best (2+2.5).


# ---------------------------------------------------------------------------------------
# Features with a document stride, on a real (tiny) sentencepiece vocabulary.

@pytest.fixture(scope='module')
def tokenizer():
  text = ['the river flows past the old mill and the young miller sings',
          'a quiet town beside the river keeps its bridges and its songs'] * 40
  return tokenizer_lib.train(text, 120, max_sentences=1000)


def test_tokenize_with_spans_maps_to_the_text(tokenizer):
  text = 'The  river, flows past  mills.'
  ids, spans = squad.tokenize_with_spans(tokenizer, text)
  assert ids == tokenizer.encode([text])[0]
  pieces = [text[s:e] for s, e in spans if e > s]
  assert ''.join(pieces) == text.replace(' ', '')
  assert all(not text[s:e].startswith(' ') for s, e in spans)


def test_featurize_windows_positions_and_max_context(tokenizer):
  context = ' '.join(['the river flows past the old mill'] * 6) + ' and the young miller sings'
  answer = 'young miller'
  start = context.index(answer)
  ex = squad.SquadExample('q1', 'who sings', context, (answer,), (start,))
  feats = squad.featurize([ex], tokenizer, seq_len=32, doc_stride=8, max_query_len=8,
                          is_training=True)
  assert len(feats) > 2  # The context needed several windows.
  assert feats.input_ids.shape == (len(feats), 32)
  found = 0
  for f in range(len(feats)):
    s, e = feats.start_positions[f], feats.end_positions[f]
    if s == 0:
      assert e == 0
      continue
    found += 1
    text = context[feats.token_spans[f][s][0]:feats.token_spans[f][e][1]]
    assert text == answer
    assert feats.segment_ids[f, s] == 1
  assert found >= 1  # In at least one window, and nowhere else pointed at [CLS].
  # Every context character range is the max-context choice of exactly one window.
  owners = {}
  for f in range(len(feats)):
    for pos, is_max in feats.max_context[f].items():
      if is_max:
        span = feats.token_spans[f][pos]
        assert span not in owners
        owners[span] = f
  _, all_spans = squad.tokenize_with_spans(tokenizer, context)
  assert set(owners) == set(all_spans)


def test_read_official_json_and_unanswerable(tmp_path):
  data = {'version': 'v2.0', 'data': [{'title': 't', 'paragraphs': [{
      'context': 'Denver won the game.',
      'qas': [{'id': '1', 'question': 'Who won?', 'is_impossible': False,
               'answers': [{'text': 'Denver', 'answer_start': 0}]},
              {'id': '2', 'question': 'Who lost?', 'is_impossible': True, 'answers': [],
               'plausible_answers': [{'text': 'Denver', 'answer_start': 0}]}]}]}]}
  (tmp_path / 'dev-v2.0.json').write_text(json.dumps(data))
  examples = squad.read_examples('2.0', 'validation', data_dir=str(tmp_path))
  assert [e.qid for e in examples] == ['1', '2']
  assert examples[0].answers == ('Denver',) and examples[0].answer_starts == (0,)
  assert examples[1].is_impossible and examples[1].answers == ()


# ---------------------------------------------------------------------------------------
# Fine-tuning end to end, on the task engine and a mesh of several devices.

def _squad_file(path, rng, n, words, cue):
  """Contexts of random words with the cue word at a random place; 'where is the cue'
  asks for it, so the answer is always the cue's own span."""
  paragraphs = []
  for i in range(n):
    tokens = [rng.choice(words) for _ in range(rng.randrange(6, 14))]
    tokens.insert(rng.randrange(len(tokens) + 1), cue)
    context = ' '.join(tokens)
    start = context.index(cue)
    paragraphs.append({'context': context, 'qas': [{
        'id': f'q{i}', 'question': f'where is {cue}',
        'answers': [{'text': cue, 'answer_start': start}]}]})
  path.write_text(json.dumps({'version': '1.1', 'data': [{'title': 't',
                                                        'paragraphs': paragraphs}]}))


def _study_squad_config():
  """The squad section of configs/study.py (its defaults, as the study passes it)."""
  return load_config_file(os.path.join(test_finetune.ROOT, 'configs', 'study.py'), 'cpu').squad


def test_squad_finetunes_on_a_mesh_and_finds_the_answer(pretrained, tmp_path):  # noqa: F811
  tf_ = test_finetune
  rng = random.Random(0)
  data = tmp_path / 'squad'
  data.mkdir()
  _squad_file(data / 'train-v1.1.json', rng, 96, tf_.WORDS, tf_.CUE)
  _squad_file(data / 'dev-v1.1.json', rng, 24, tf_.WORDS, tf_.CUE)
  c = _study_squad_config()
  c.update(data_dir=str(data), seq_len=32, doc_stride=16, max_query_len=8, num_epochs=6,
           batch_size=8, lr=3e-3, max_answer_len=4)
  mesh = sharding.make_mesh({'data': 4, 'fsdp': 2, 'tensor': 1})
  out = tmp_path / 'run'
  out.mkdir()
  result = squad.finetune_and_evaluate(c, version='1.1', init_from=str(pretrained), seed=0,
                                       workdir=str(out), mesh=mesh)
  assert (result['num_train'], result['num_dev']) == (96, 24)
  assert result['pretrained_step'] == 2
  assert result['metrics']['exact'] >= 75, result['metrics']
  predictions = json.loads((out / 'predictions_seed_0.json').read_text())
  assert sorted(predictions) == sorted(f'q{i}' for i in range(24))
  assert sum(p == tf_.CUE for p in predictions.values()) >= 18
