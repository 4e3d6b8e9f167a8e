"""tools/hf_glue_reference.py (the Hugging Face side of GLUE parity) reads the same examples,
draws the same training subset and scores with the same metrics as sharedbert's GLUE path:
checked here on fixture files, without torch (the tool imports it only to train)."""

import importlib.util
import os

import numpy as np
import pytest

from sharedbert.data import glue
from sharedbert.metrics import glue as glue_metrics
from sharedbert.tasks import engine

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tool():
  spec = importlib.util.spec_from_file_location(
      'hf_glue_reference', os.path.join(REPO, 'tools', 'hf_glue_reference.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _write(path, text, bom=False):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes((b'\xef\xbb\xbf' if bom else b'') + text.encode('utf-8'))


@pytest.fixture
def glue_dir(tmp_path):
  rng = np.random.default_rng(0)
  words = ['the', 'cat', '"', 'sat', 'on', 'a', 'mat', ',', 'quietly']
  sent = lambda: ' '.join(rng.choice(words, size=rng.integers(2, 9)))
  # The real files' quirks: CoLA without a header, MRPC with a BOM and literal quotes,
  # STS-B with float scores after many columns, SST-2 with a header.
  _write(tmp_path / 'CoLA' / 'train.tsv', ''.join(
      f'gj04\t{i % 2}\t{"*" if i % 2 == 0 else ""}\t{sent()}\n' for i in range(40)))
  _write(tmp_path / 'MRPC' / 'train.tsv', 'Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n' +
         ''.join(f'{i % 2}\t{i}\t{i + 1}\t{sent()}\t{sent()}\n' for i in range(40)), bom=True)
  _write(tmp_path / 'STS-B' / 'train.tsv',
         'index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2'
         '\tscore\n' + ''.join(f'{i}\tg\tf\ty\t{i:04d}\tn\tn\t{sent()}\t{sent()}\t'
                               f'{rng.uniform(0, 5):.3f}\n' for i in range(40)))
  _write(tmp_path / 'SST-2' / 'train.tsv',
         'sentence\tlabel\n' + ''.join(f'{sent()} \t{i % 2}\n' for i in range(40)))
  return tmp_path


@pytest.mark.parametrize('task', ['cola', 'mrpc', 'stsb', 'sst2'])
def test_the_reference_reads_the_same_examples_and_subset(glue_dir, task):
  tool = _tool()
  ours = glue.load_examples(task, 'train', glue_dir=str(glue_dir))
  theirs = tool.read_split(str(glue_dir), task, 'train')
  assert [(e.text_a, e.text_b, e.label) for e in ours] == theirs
  assert ([(e.text_a, e.text_b, e.label) for e in engine.subset(ours, 13)] ==
          tool.subset(theirs, 13))


@pytest.mark.parametrize('task', ['cola', 'mrpc', 'stsb', 'sst2'])
def test_the_reference_scores_like_sharedbert(task):
  tool = _tool()
  rng = np.random.default_rng(1)
  if task == 'stsb':
    labels = rng.uniform(0, 5, 200).round(1)  # Ties, as real scores have.
    preds = labels + rng.normal(0, 1, 200).round(1)
  else:
    labels = rng.integers(0, 2, 200)
    preds = np.where(rng.random(200) < 0.7, labels, 1 - labels)
  ours = glue_metrics.task_metrics(task, preds, labels)
  theirs = tool.metrics(task, preds, labels)
  assert set(ours) == set(theirs)
  for name in ours:
    assert theirs[name] == pytest.approx(ours[name], abs=1e-9), name
