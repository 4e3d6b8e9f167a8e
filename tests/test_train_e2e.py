"""End to end through the real entry point: a tiny run learns, writes its workdir, resumes."""

import json
import os
import subprocess
import sys

from test_sharding import write_corpus

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_FLAGS = [
    '--config.model.num_layers=1', '--config.model.hidden_size=32', '--config.model.num_heads=2',
    '--config.model.mlp_dim=64', '--config.model.vocab_size=256', '--config.data.batch_size=16',
    '--config.data.seq_len=32', '--config.data.max_predictions=5', '--config.optim.lr=3e-3',
    '--config.optim.warmup_steps=5', '--config.log_every_steps=5', '--config.eval_every_steps=20',
    '--config.ckpt.every_steps=20', '--config.model.dropout_rate=0.0',
    '--config.model.attention_dropout_rate=0.0', '--config.data.eval_fraction=0.1',
]


def run_main(workdir, corpus, *extra):
  env = dict(os.environ, JAX_PLATFORMS='cpu', TF_CPP_MIN_LOG_LEVEL='2')
  cmd = [sys.executable, '-m', 'sharedbert.main', '--config=configs/shared_base.py:tiny',
         f'--workdir={workdir}', f'--config.data.corpus={corpus}', *TINY_FLAGS, *extra]
  return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def read_metrics(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]


def test_tiny_run_learns_writes_its_workdir_and_resumes(tmp_path):
  corpus = tmp_path / 'corpus.txt'
  write_corpus(corpus, num_docs=400)
  workdir = tmp_path / 'run'
  first = run_main(workdir, corpus, '--config.total_steps=40')
  assert first.returncode == 0, first.stderr[-3000:]
  assert 'Starting a new run' in first.stderr
  for name in ('config.json', 'vocab.model', 'metrics.jsonl'):
    assert (workdir / name).exists(), name
  assert any(f.startswith('events.out.tfevents') for f in os.listdir(workdir / 'tensorboard'))
  assert sorted(os.listdir(workdir / 'checkpoints')) == ['20', '40']
  config = json.loads((workdir / 'config.json').read_text())
  assert config['model']['attention'] == 'shared' and config['total_steps'] == 40

  metrics = read_metrics(workdir)
  train = [m for m in metrics if 'loss' in m]
  evals = [m for m in metrics if 'eval_loss' in m]
  assert [m['step'] for m in train] == list(range(5, 41, 5))
  for key in ('loss', 'mlm_accuracy', 'learning_rate', 'grad_norm', 'tokens_per_sec'):
    assert key in train[0], key
  assert train[-1]['loss'] < train[0]['loss'] - 0.5, [m['loss'] for m in train]
  assert [m['step'] for m in evals] == [20, 40]
  assert evals[-1]['eval_loss'] < evals[0]['eval_loss']
  assert 0 < evals[-1]['eval_majority_accuracy'] < 1

  # Same command, larger total_steps: resumes at 40 and continues to 60.
  second = run_main(workdir, corpus, '--config.total_steps=60')
  assert second.returncode == 0, second.stderr[-3000:]
  assert 'Resuming from the checkpoint at step 40' in second.stderr
  steps = [m['step'] for m in read_metrics(workdir) if 'loss' in m]
  assert steps[-4:] == [45, 50, 55, 60]
  assert sorted(os.listdir(workdir / 'checkpoints'), key=int)[-1] == '60'

  # Running a finished run again does nothing and says so, and writes nothing: with a
  # smaller total_steps too, config.json still describes the run that made the checkpoints
  # (issue 56: it was rewritten with the new total_steps, and exports' cards followed it).
  def snapshot():
    return {str(p.relative_to(workdir)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in workdir.rglob('*') if p.is_file()}
  before = snapshot()
  for total in (60, 10):
    third = run_main(workdir, corpus, f'--config.total_steps={total}')
    assert third.returncode == 0, third.stderr[-3000:]
    assert 'Nothing to do' in third.stderr
    assert snapshot() == before, total
  assert json.loads((workdir / 'config.json').read_text())['total_steps'] == 60
