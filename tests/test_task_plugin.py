"""A task that is not GLUE, added from this file alone (issue 55): token tagging, with a
per-token head and metric, registered by name and trained and scored by the task runner
(sharedbert/tasks/runner.py), the flow SQuAD runs through too. No file of the package is
edited."""

import random

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from sharedbert.errors import UserError
from sharedbert.models import bert
from sharedbert.tasks import runner
from sharedbert.tasks import task as task_lib

from test_finetune import CUE, WORDS, pretrained, tiny_finetune_config, write_sst2  # noqa: F401

SEQ_LEN = 16


class Tagger(nn.Module):
  """The encoder, then two logits per token."""
  config: bert.ModelConfig

  @nn.compact
  def __call__(self, input_ids, segment_ids, input_mask, *, deterministic: bool = True):
    out = bert.BertEncoder(self.config, name='bert')(input_ids, segment_ids, input_mask,
                                                     deterministic=deterministic)
    return bert.dense(self.config, 2, ('embed', None), 'tags')(
        out['sequence_output']).astype(jnp.float32)


class CueTagging:
  """Tag each token: 1 where it is a piece of the cue word. Sentences made here."""
  name = 'cue_tagging'
  bucket = False  # Outputs per token: every batch keeps its columns.

  def __init__(self, num_train=96, num_dev=32):
    rng = random.Random(0)

    def sentence():
      words = [rng.choice(WORDS) for _ in range(rng.randint(3, 6))]
      if rng.random() < 0.5:
        words.insert(rng.randint(0, len(words)), CUE)
      return ' '.join(words)
    self.train = [sentence() for _ in range(num_train)]
    self.dev = [sentence() for _ in range(num_dev)]
    self.tokenizer = None

  def examples(self):
    return self.train, self.dev

  def featurize(self, examples, tokenizer, *, training):
    cue = set(tokenizer.encode([CUE])[0])
    ids = np.zeros((len(examples), SEQ_LEN), np.int32)
    tags = np.zeros((len(examples), SEQ_LEN), np.int32)
    for i, row in enumerate(tokenizer.encode(examples)):
      row = [tokenizer.cls_id] + row[:SEQ_LEN - 2] + [tokenizer.sep_id]
      ids[i, :len(row)] = row
      tags[i, :len(row)] = [int(t in cue) for t in row]
    arrays = {'input_ids': ids, 'segment_ids': np.zeros_like(ids)}
    if training:
      arrays['tags'] = tags
    return task_lib.TaskData(arrays, runner.lengths_of(ids), extra=tags)

  def model(self, model_config):
    return Tagger(model_config)

  def loss(self, logits, batch):
    mask = batch['input_mask'] * batch['weights'][:, None]
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch['tags'])
    return jnp.sum(ce * mask) / jnp.maximum(jnp.sum(mask), 1.0)

  def predictions(self, logits, data, examples):
    return {'tags': np.argmax(logits, -1), 'gold': data.extra, 'lengths': data.lengths}

  def metrics(self, predictions, examples):
    real = np.arange(SEQ_LEN)[None, :] < predictions['lengths'][:, None]
    pred, gold = predictions['tags'][real], predictions['gold'][real]
    tp = int(np.sum((pred == 1) & (gold == 1)))
    f1 = 2 * tp / max(1, int(np.sum(pred == 1)) + int(np.sum(gold == 1)))
    return {'score': f1, 'token_accuracy': float(np.mean(pred == gold)),
            'cue_tokens': int(np.sum(gold == 1))}


@pytest.fixture
def cue_tagging():
  task_lib.register('cue_tagging')(CueTagging)
  yield CueTagging
  del task_lib.TASKS['cue_tagging']


def test_a_registered_task_is_trained_and_scored_by_the_runner(cue_tagging, pretrained):  # pylint: disable=redefined-outer-name
  task = task_lib.make('cue_tagging', num_train=96, num_dev=32)
  optim = tiny_finetune_config('task=sst2', pretrained).optim
  result = runner.fit_and_score(task, init_from=str(pretrained), optim=optim, num_epochs=8,
                                batch_size=16, seed=0)
  m = result['metrics']
  assert result['num_train'] == 96 and result['num_dev'] == 32 and len(result['epoch_time_s']) == 8
  assert result['pretrained_step'] == 2 and m['cue_tokens'] > 0
  # Tagging a token by its identity is learnable in a few epochs; chance F1 is far lower.
  assert m['score'] > 0.9, m
  assert result['predictions']['tags'].shape == (32, SEQ_LEN)


def test_an_unknown_task_names_the_known_ones(cue_tagging):
  from sharedbert.tasks import glue_task, squad  # noqa: F401  (they register glue, squad)
  with pytest.raises(UserError, match="unknown task 'nope'; known: cue_tagging, glue, squad"):
    task_lib.make('nope')


def test_a_glue_task_is_a_task_too_and_the_runner_trains_it(pretrained, tmp_path):  # pylint: disable=redefined-outer-name
  """GLUE's tasks implement the same protocol (GlueTask, which TaskRun builds on): one seed
  of SST-2 (its label: the cue word) through the runner."""
  write_sst2(tmp_path / 'glue', {'train': 160, 'dev': 40}, seed=1)
  c = tiny_finetune_config('task=sst2', pretrained, glue_dir=str(tmp_path / 'glue'))
  task = task_lib.make('glue', task='sst2', data=c.data)
  assert task.name == 'sst2' and task.bucket
  result = runner.fit_and_score(task, init_from=str(pretrained), optim=c.optim, num_epochs=8,
                                batch_size=16, seed=0)
  assert (result['num_train'], result['num_dev']) == (160, 40)
  assert result['metrics']['accuracy'] > 0.9 and result['metrics']['score'] > 0.9, result['metrics']
  assert result['predictions'].shape == (40,)
