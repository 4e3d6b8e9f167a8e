"""Crashes and preemption, with real processes and real signals.

One reference run goes uninterrupted. Beside it the same command is stopped and started
again: SIGTERM (saves at the current step, exit 143; a second run on the workdir is
refused while the first lives), then SIGKILL after a checkpoint, then the latest
checkpoint is damaged by hand, then it runs to the end. Its metrics.jsonl must equal the
reference's, value for value. Also: non-finite steps stop a run with exit 3 keeping the
last good checkpoint, and a SIGKILL in the middle of an async save leaves only a
temporary directory that no reader takes for a checkpoint and the next writer removes.
"""

import json
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import time

import ml_collections
import pytest

from sharedbert import checkpoint as checkpoint_lib
from sharedbert import config as sb_config
from sharedbert import train
from sharedbert.utils import workdir_lock
from sharedbert.errors import UserError

REPO = pathlib.Path(__file__).resolve().parents[1]

TINY = ['--config=configs/shared_base.py:tiny', '--config.model.num_layers=1',
        '--config.model.hidden_size=32', '--config.model.num_heads=2',
        '--config.model.mlp_dim=64', '--config.model.vocab_size=512',
        '--config.data.batch_size=8', '--config.data.seq_len=32',
        '--config.data.max_predictions=5']
# Checkpoints every 3 steps, log lines every 2: a resume usually starts mid-interval, so
# the metrics carried in the checkpoint are exercised too. Dropout stays on (0.1).
CHAIN = ['--config.total_steps=30', '--config.log_every_steps=2', '--config.ckpt.every_steps=3',
         '--config.eval_every_steps=10']
TIMING_KEYS = ('tokens_per_sec', 'step_time')  # The only values allowed to differ.
TIMEOUT = 900  # Seconds for one run: generous, for machines shared with other work.


def write_corpus(path: pathlib.Path):
  rng = random.Random(0)
  syllables = ['ka', 'lo', 'mi', 'ne', 'ru', 'to', 'sa', 'vi', 'de', 'po', 'gu', 'fe']
  words = [''.join(rng.choice(syllables) for _ in range(rng.randint(1, 3)))
           for _ in range(300)]
  path.write_text(''.join(' '.join(rng.choice(words) for _ in range(rng.randint(20, 60)))
                          + '.\n\n' for _ in range(200)))


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
  root = tmp_path_factory.mktemp('resume')
  corpus = root / 'corpus.txt'
  write_corpus(corpus)
  # The suite's compilation cache comes with os.environ (conftest.py): runs after the first
  # load their compiled steps instead of compiling again.
  env = dict(os.environ, JAX_PLATFORMS='cpu', TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=str(REPO))
  return root, corpus, env


def config_from_flags(corpus, *extra) -> ml_collections.ConfigDict:
  """The config that `command(corpus, workdir, *extra)` gives sharedbert.main."""
  config = sb_config.pretrain_config('shared', 'tiny')
  for flag in [*TINY[1:], f'--config.data.corpus={corpus}', *extra]:
    path, value = flag[len('--config.'):].split('=', 1)
    *parents, leaf = path.split('.')
    node = config
    for name in parents:
      node = node[name]
    node[leaf] = type(node[leaf])(value)
  return config


def command(corpus, workdir, *extra):
  return [sys.executable, '-m', 'sharedbert.main', *TINY, f'--config.data.corpus={corpus}',
          f'--workdir={workdir}', *extra]


_STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def no_leftover_processes():
  yield
  while _STARTED:  # A failed test leaves no run behind (stopped ones included).
    proc = _STARTED.pop()
    if proc.poll() is None:
      proc.kill()
      proc.wait()


def start(cmd, env, log: pathlib.Path) -> subprocess.Popen:
  # Output to a file, not a pipe: nobody reads a pipe while we wait on other things.
  proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                          stderr=open(log, 'w'))
  _STARTED.append(proc)
  return proc


def wait_until(condition, proc: subprocess.Popen, log: pathlib.Path, what: str,
               timeout: float = TIMEOUT):
  deadline = time.time() + timeout
  while not condition():
    if proc.poll() is not None:
      pytest.fail(f'the run ended (exit {proc.returncode}) before {what}:\n'
                  f'{log.read_text()[-3000:]}')
    if time.time() > deadline:
      proc.kill()
      pytest.fail(f'timed out waiting for {what}')
    time.sleep(0.01)


def records(workdir: pathlib.Path) -> list[dict]:
  path = workdir / 'metrics.jsonl'
  if not path.exists():
    return []
  out = []
  for line in path.read_text().splitlines():
    try:
      out.append(json.loads(line))
    except ValueError:  # A line being written right now.
      pass
  return out


def steps(workdir: pathlib.Path) -> list[int]:
  d = workdir / 'checkpoints'
  return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.exists() else []


def listing(workdir: pathlib.Path) -> dict:
  return {str(p.relative_to(workdir)): (p.stat().st_size, p.stat().st_mtime_ns)
          for p in [workdir, *sorted(workdir.rglob('*'))]}


def error_lines(stderr: str) -> list[str]:
  return [l for l in stderr.splitlines() if l.startswith('sharedbert: error:')]


def deterministic(recs: list[dict]) -> list[dict]:
  return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in recs]


def test_preempt_kill_damage_resume_equals_uninterrupted_run(setup):
  root, corpus, env = setup
  ref_dir, run_dir = root / 'reference', root / 'interrupted'
  reference = start(command(corpus, ref_dir, *CHAIN), env, root / 'reference.log')
  # Once it logs, its compiled step is in the cache: the other runs load it.
  wait_until(lambda: records(ref_dir), reference, root / 'reference.log', 'the first log line')

  # 1. SIGTERM: a checkpoint at the current step, exit 143. While the run is alive (held
  #    with SIGSTOP), a second run on its workdir is refused and changes nothing.
  log_a = root / 'a.log'
  run_a = start(command(corpus, run_dir, *CHAIN), env, log_a)
  wait_until(lambda: records(run_dir), run_a, log_a, 'the first log line')
  os.kill(run_a.pid, signal.SIGSTOP)
  before = listing(run_dir)
  # The second run is this test process: same config, same workdir.
  with pytest.raises(UserError) as refused:
    train.train_and_evaluate(config_from_flags(corpus, *CHAIN), str(run_dir))
  assert str(refused.value).startswith(
      f'workdir {run_dir} is in use by another run (pid {run_a.pid} on host '
      f'{socket.gethostname()}, started ')
  assert str(refused.value).endswith(
      'wait for it to finish or stop it, or pass another --workdir')
  assert listing(run_dir) == before
  os.kill(run_a.pid, signal.SIGTERM)
  os.kill(run_a.pid, signal.SIGCONT)
  assert run_a.wait(timeout=TIMEOUT) == 143, log_a.read_text()[-3000:]
  text_a = log_a.read_text()
  preempted_at = int(text_a.split('preempted at step ')[1].split(';')[0])
  assert 0 < preempted_at < 30
  assert steps(run_dir)[-1] == preempted_at
  assert max(r['step'] for r in records(run_dir)) <= preempted_at
  assert not (run_dir / workdir_lock.LOCK_FILE).exists()  # Released at exit.

  # 2. SIGKILL once a later checkpoint is finalized: the lock file stays (stale).
  log_b = root / 'b.log'
  run_b = start(command(corpus, run_dir, *CHAIN), env, log_b)
  wait_until(lambda: steps(run_dir)[-1] > preempted_at, run_b, log_b,
             'a checkpoint after the preemption')
  run_b.kill()
  run_b.wait()
  assert (run_dir / workdir_lock.LOCK_FILE).exists()
  assert 'Resuming from the checkpoint at step %d' % preempted_at in log_b.read_text()

  # 3. Damage the latest checkpoint: truncate the largest array file.
  damaged = steps(run_dir)[-1]
  biggest = max((p for p in (run_dir / 'checkpoints' / str(damaged) / 'state').rglob('*')
                 if p.is_file()), key=lambda p: p.stat().st_size)
  with open(biggest, 'r+b') as f:
    f.truncate(biggest.stat().st_size // 2)

  # 4. The same command again: the damaged step is reported and set aside, the one
  #    before is used, and the run finishes with the reference's numbers.
  last = subprocess.run(command(corpus, run_dir, *CHAIN), cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=TIMEOUT)
  assert last.returncode == 0, last.stderr[-3000:]
  assert f'checkpoint {damaged} in {run_dir}/checkpoints is damaged' in last.stderr
  assert f'instead of the damaged later step(s) {damaged}' in last.stderr
  assert [p.name.split('-')[0] for p in (run_dir / 'checkpoints-damaged').iterdir()] == [
      str(damaged)]
  assert reference.wait(timeout=TIMEOUT) == 0, (root / 'reference.log').read_text()[-3000:]

  want, got = deterministic(records(ref_dir)), deterministic(records(run_dir))
  assert [r['step'] for r in got] == [r['step'] for r in want]  # One history, no repeats.
  assert got == want
  assert len([r for r in got if 'loss' in r]) == 15 and 'eval_loss' in got[-1]
  assert not (run_dir / workdir_lock.LOCK_FILE).exists()
  assert not [p for p in (run_dir / 'checkpoints').iterdir() if not p.name.isdigit()]


def test_non_finite_steps_are_skipped_then_the_run_stops(setup):
  root, corpus, env = setup
  workdir = root / 'diverging'
  # lr 1e30: step 1 is finite and blows the weights up, every later step overflows.
  run = subprocess.run(
      command(corpus, workdir, '--config.total_steps=12', '--config.log_every_steps=1',
              '--config.ckpt.every_steps=1', '--config.optim.lr=1e30',
              '--config.optim.warmup_steps=0', '--config.optim.max_skipped_steps=3'),
      cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT)
  assert run.returncode == 3, run.stderr[-3000:]
  assert error_lines(run.stderr) == [
      'sharedbert: error: 3 consecutive steps (up to step 4) had a non-finite loss, '
      'gradient or update, optim.max_skipped_steps=3; stopped, and the last good checkpoint (step 1) '
      f'is kept in {workdir}/checkpoints. Lower optim.lr (or check the data), then run '
      'again to resume']
  assert 'Traceback' not in run.stderr
  train = [r for r in records(workdir) if 'loss' in r]
  assert [(r['step'], r['skipped'], r['skipped_total']) for r in train] == [
      (1, 0.0, 0), (2, 1.0, 1), (3, 1.0, 2), (4, 1.0, 3)]
  assert train[0]['loss'] is not None and train[1]['loss'] is None  # NaN is written null.
  assert steps(workdir) == [1]  # None saved from inside the run of skipped steps.
  assert not (workdir / workdir_lock.LOCK_FILE).exists()


KILLED_SAVER = '''
import sys
import ml_collections, numpy as np
from sharedbert import checkpoint
cfg = ml_collections.ConfigDict(dict(every_steps=1, max_to_keep=5, async_save=True))
ckpt = checkpoint.Checkpointer(sys.argv[1], cfg)
ckpt.save(1, {'w': np.zeros(4, np.float32)}, {'data_position': 1}, force=True)
ckpt.wait()
big = np.random.default_rng(0).random(64 << 20, np.float32)  # 256 MB, incompressible.
ckpt.save(2, {'w': big}, {'data_position': 2}, force=True)
print('saving', flush=True)
ckpt.wait()
'''


def test_kill_during_async_save_leaves_no_checkpoint(setup, tmp_path):
  _, _, env = setup
  saver = subprocess.Popen([sys.executable, '-c', KILLED_SAVER, str(tmp_path)], cwd=REPO,
                           env=env, stdout=subprocess.PIPE, text=True)
  _STARTED.append(saver)
  assert saver.stdout.readline() == 'saving\n'  # Step 2 is being written in the background,
  deadline = time.time() + 60                    # into a directory orbax also creates there.
  while not list((tmp_path / 'checkpoints').glob('2.orbax-checkpoint-tmp*')):
    assert time.time() < deadline and saver.poll() is None
    time.sleep(0.005)
  saver.send_signal(signal.SIGKILL)
  saver.wait()
  names = sorted(p.name for p in (tmp_path / 'checkpoints').iterdir())
  assert names[0] == '1' and len(names) == 2 and names[1].startswith('2.orbax-checkpoint-tmp'), names

  reader = checkpoint_lib.Checkpointer(str(tmp_path), None, read_only=True)
  assert reader.all_steps() == [1]
  step, meta = reader.latest_meta()
  assert step == 1 and meta['data_position'] == 1
  reader.close()
  cfg = ml_collections.ConfigDict(dict(every_steps=1, max_to_keep=5, async_save=True))
  writer = checkpoint_lib.Checkpointer(str(tmp_path), cfg)
  writer.wait()
  writer.close()
  assert sorted(p.name for p in (tmp_path / 'checkpoints').iterdir()) == ['1']


def test_a_run_stopped_part_way_down_its_schedule_resumes_along_it(setup, tmp_path):
  """optim.schedule_steps: 6 steps of a 12-step schedule, then a rerun to 12, writes the
  same metrics as one 12-step run (the uptraining's timed checkpoints rely on it)."""
  root, corpus, _ = setup
  extra = ['--config.log_every_steps=3', '--config.eval_every_steps=6',
           '--config.ckpt.every_steps=6', '--config.optim.warmup_steps=3']
  whole = tmp_path / 'whole'
  train.train_and_evaluate(config_from_flags(corpus, '--config.total_steps=12', *extra), whole)
  parts = tmp_path / 'parts'
  with pytest.raises(UserError, match='schedule_steps=12 is shorter'):
    train.train_and_evaluate(config_from_flags(
        corpus, '--config.total_steps=13', '--config.optim.schedule_steps=12', *extra), parts)
  for stop in (6, 12):
    train.train_and_evaluate(config_from_flags(
        corpus, f'--config.total_steps={stop}', '--config.optim.schedule_steps=12', *extra),
        parts)
  assert deterministic(records(parts)) == deterministic(records(whole))
  assert records(whole)[-1]['step'] == 12


def _traceback_free(stderr: str) -> bool:
  return 'Traceback' not in stderr and 'Segmentation fault' not in stderr


@pytest.mark.parametrize('signum,code,said', [
    (signal.SIGINT, 130, 'interrupted'), (signal.SIGHUP, 129, 'stopped by SIGHUP')])
def test_a_signal_during_training_saves_at_its_step(setup, tmp_path, signum, code, said):
  """A real signal to a real run mid-training saves like SIGTERM and exits 128 + signal with
  one line, leaving no temporary checkpoint folder. Ctrl-C (issue 44, item 2) printed a
  52-line traceback and saved nothing; SIGHUP, the terminal closing (issue 56, item 6),
  exited 129 with no message, no checkpoint and a *.orbax-checkpoint-tmp folder."""
  root, corpus, env = setup
  run_dir, log = tmp_path / 'run', tmp_path / 'run.log'
  proc = start(command(corpus, run_dir, *CHAIN), env, log)
  wait_until(lambda: records(run_dir), proc, log, 'the first log line')
  proc.send_signal(signum)
  assert proc.wait(timeout=TIMEOUT) == code, log.read_text()[-3000:]
  text = log.read_text()
  assert _traceback_free(text), text[-3000:]
  line = [l for l in text.splitlines() if l.startswith(f'sharedbert: {said} at step ')]
  assert len(line) == 1, text[-3000:]
  at = int(line[0].split(' at step ')[1].split(';')[0])
  assert steps(run_dir)[-1] == at  # Saved at the step it stopped: a rerun resumes there
  # (resumes are exact: test_preempt_kill_damage_resume_equals_uninterrupted_run).
  assert not [p for p in (run_dir / 'checkpoints').iterdir() if 'tmp' in p.name]


def test_ctrl_c_before_the_first_step_exits_130_without_a_traceback(setup, tmp_path):
  """SIGINT while the run builds its state and compiles (it segfaulted, rc 139): one line,
  exit 130, nothing trained and nothing saved."""
  root, corpus, env = setup
  run_dir, log = tmp_path / 'run', tmp_path / 'run.log'
  proc = start(command(corpus, run_dir, *CHAIN), env, log)
  wait_until(lambda: 'Compiling the train step' in log.read_text(), proc, log,
             'the compilation')
  proc.send_signal(signal.SIGINT)
  code = proc.wait(timeout=TIMEOUT)
  text = log.read_text()
  assert code == 130, text[-3000:]
  assert _traceback_free(text), text[-3000:]
  assert len([l for l in text.splitlines() if l.startswith('sharedbert: interrupted')]) == 1
  assert not records(run_dir) or max(r['step'] for r in records(run_dir)) <= 1


@pytest.mark.parametrize('damage', ['truncate', 'flip'])
def test_every_checkpoint_damaged_is_one_line_on_a_clean_stderr(setup, tmp_path, damage):
  """Issue 44, item 7: the right one-line error came buried in 3,503 lines of
  'Exception ignored in coroutine ... TensorStore' (files truncated); with bits flipped in
  place, the reads still in flight printed 'Event loop is closed' tracebacks."""
  root, corpus, env = setup
  run_dir = tmp_path / 'run'
  short = ['--config.total_steps=3', '--config.log_every_steps=1', '--config.ckpt.every_steps=3',
           '--config.eval_every_steps=3', '--config.ckpt.max_to_keep=1']
  first = subprocess.run(command(corpus, run_dir, *short), cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=TIMEOUT)
  assert first.returncode == 0, first.stderr[-3000:]
  for step in steps(run_dir):
    files = [p for p in (run_dir / 'checkpoints' / str(step) / 'state').rglob('*')
             if p.is_file() and p.stat().st_size > 0]
    if damage == 'flip':  # 4 KiB inverted inside the largest data file: reads fail part-way.
      files = [max(files, key=lambda p: p.stat().st_size)]
    for path in files:
      with open(path, 'r+b') as f:
        if damage == 'truncate':
          f.truncate(path.stat().st_size // 2)
        else:
          f.seek(64)
          data = f.read(4096)
          f.seek(64)
          f.write(bytes(b ^ 0xFF for b in data))
  again = subprocess.run(command(corpus, run_dir, '--config.total_steps=6', *short[1:]),
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT)
  assert again.returncode == 2, again.stderr[-3000:]
  assert error_lines(again.stderr)[0].startswith(
      f'sharedbert: error: no checkpoint in {run_dir}/checkpoints could be restored')
  noise = [l for l in again.stderr.splitlines() if 'coroutine' in l or 'Traceback' in l]
  assert not noise, again.stderr[-3000:]
  assert len(again.stderr.splitlines()) < 40, again.stderr[-3000:]
