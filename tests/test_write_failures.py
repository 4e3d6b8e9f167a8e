"""A checkpoint or metrics write that fails stops the run at once, in one line (exit 4 from
sharedbert.main), keeps the last good checkpoint, and the rerun resumes exactly.

In process: the free-space check (a disk that reports too little room), a save that
orbax refuses, a metrics file that cannot be written. As a command, on a real 12 MB tmpfs
(a full disk), where this machine lets the test mount one (root, as in CI).
"""

import errno
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from sharedbert import checkpoint as checkpoint_lib
from sharedbert.utils import metric_writer
from sharedbert import train
from test_resume import config_from_flags, write_corpus

REPO = pathlib.Path(__file__).resolve().parents[1]
RUN = ['--config.total_steps=12', '--config.log_every_steps=1', '--config.ckpt.every_steps=4',
       '--config.eval_every_steps=12', '--config.ckpt.async_save=false']


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  path = tmp_path_factory.mktemp('corpus') / 'corpus.txt'
  write_corpus(path)
  return path


def losses(workdir) -> dict[int, float]:
  rows = [json.loads(line) for line in (workdir / 'metrics.jsonl').read_text().splitlines()]
  return {r['step']: r['loss'] for r in rows if 'loss' in r}


@pytest.fixture(scope='module')
def reference(corpus, tmp_path_factory):
  """The same run, uninterrupted."""
  workdir = tmp_path_factory.mktemp('reference')
  train.train_and_evaluate(config_from_flags(corpus, *RUN), str(workdir))
  return losses(workdir)


def test_write_failure_reason_reads_the_os_words():
  tensorstore = ValueError('RESOURCE_EXHAUSTED: Error writing "opt_state/0.0" in OCDBT database: '
                           'Failed to write 161356 bytes to file 6: No space left on device '
                           "[os_error_code='28']")
  assert checkpoint_lib.write_failure_reason(tensorstore) == os.strerror(errno.ENOSPC)
  wrapped = RuntimeError('save failed')
  wrapped.__cause__ = PermissionError(errno.EACCES, 'denied')
  assert checkpoint_lib.write_failure_reason(wrapped) == os.strerror(errno.EACCES)
  assert checkpoint_lib.write_failure_reason(ValueError('odd\nmore')) == 'odd'


def test_a_disk_without_room_stops_before_the_save_and_the_rerun_resumes_exactly(
    corpus, reference, tmp_path, monkeypatch):
  workdir = tmp_path / 'w'
  real = shutil.disk_usage
  saves = []

  def room(path):  # Room for the first checkpoint (step 4), none for the second.
    usage = real(path)
    return usage._replace(free=usage.free if not saves else 1000)
  original_save = checkpoint_lib.Checkpointer.save

  def counting_save(self, step, *args, **kwargs):
    saved = original_save(self, step, *args, **kwargs)
    saves.append(step)
    return saved
  monkeypatch.setattr(checkpoint_lib.shutil, 'disk_usage', room)
  monkeypatch.setattr(checkpoint_lib.Checkpointer, 'save', counting_save)
  with pytest.raises(checkpoint_lib.WriteFailed) as failed:
    train.train_and_evaluate(config_from_flags(corpus, *RUN), str(workdir))
  assert str(failed.value).startswith(
      f'could not write checkpoint 8 to {workdir}/checkpoints: No space left on device (')
  assert '\n' not in str(failed.value)
  # No step after the failed save; the good checkpoint is the only one.
  assert max(losses(workdir)) == 8
  assert sorted(p.name for p in (workdir / 'checkpoints').iterdir()) == ['4']
  # Room again: the same command resumes from step 4 and trains what the reference did.
  monkeypatch.setattr(checkpoint_lib.shutil, 'disk_usage', real)
  train.train_and_evaluate(config_from_flags(corpus, *RUN), str(workdir))
  assert losses(workdir) == reference


def test_a_save_that_orbax_refuses_is_one_line(corpus, tmp_path, monkeypatch):
  workdir = tmp_path / 'w'
  manager_save = checkpoint_lib.ocp.CheckpointManager.save

  def refuse_after_the_first(self, step, *args, **kwargs):
    if step > 4:
      raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
    return manager_save(self, step, *args, **kwargs)
  monkeypatch.setattr(checkpoint_lib.ocp.CheckpointManager, 'save', refuse_after_the_first)
  with pytest.raises(checkpoint_lib.WriteFailed,
                     match=f'^could not write checkpoint 8 to {workdir}/checkpoints: '
                           f'{os.strerror(errno.EDQUOT)}$'):
    train.train_and_evaluate(config_from_flags(corpus, *RUN), str(workdir))
  assert max(losses(workdir)) == 8


def test_metrics_that_cannot_be_written_stop_the_run(corpus, tmp_path, monkeypatch):
  workdir = tmp_path / 'w'
  real_gfile = metric_writer.tf.io.gfile.GFile
  appends = []

  def gfile(path, mode='r'):  # The sixth metrics line (step 6) finds the disk full.
    if path.endswith('metrics.jsonl') and mode == 'a':
      appends.append(path)
      if len(appends) == 6:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real_gfile(path, mode)
  monkeypatch.setattr(metric_writer.tf.io.gfile, 'GFile', gfile)
  with pytest.raises(checkpoint_lib.WriteFailed,
                     match=f'^could not write the metrics of step 6 to {workdir}/metrics.jsonl: '
                           'No space left on device$'):
    train.train_and_evaluate(config_from_flags(corpus, *RUN), str(workdir))
  monkeypatch.undo()
  assert max(losses(workdir)) == 5
  assert sorted(p.name for p in (workdir / 'checkpoints').iterdir()) == ['4']


def _mount_tmpfs(path: pathlib.Path, size: str) -> bool:
  path.mkdir(parents=True, exist_ok=True)
  if shutil.which('mount') is None or os.geteuid() != 0:
    return False
  done = subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={size}', 'tmpfs', str(path)],
                        capture_output=True)
  return done.returncode == 0


def test_a_full_disk_as_a_command(corpus, tmp_path):
  """`python -m sharedbert.main` on a 12 MB filesystem (async saves, the default): exit 4,
  stderr holds the log lines and one error line, no step after the refused save; after the
  filesystem grows, the same command resumes and finishes."""
  disk = tmp_path / 'disk'
  if not _mount_tmpfs(disk, '12m'):
    pytest.skip('cannot mount a tmpfs here (needs root); the in-process tests above cover '
                'the same code paths')
  try:
    flags = ['--config=configs/standard_base.py:tiny', f'--workdir={disk}/w',
             f'--config.data.corpus={corpus}', '--config.total_steps=30',
             '--config.ckpt.every_steps=10', '--config.log_every_steps=1',
             '--config.eval_every_steps=30']
    env = dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=str(REPO))
    run = lambda: subprocess.run([sys.executable, '-m', 'sharedbert.main', *flags], cwd=REPO,
                                 env=env, capture_output=True, text=True, timeout=600)
    done = run()
    assert done.returncode == 4, done.stderr[-3000:]
    not_logs = [line for line in done.stderr.splitlines() if not line[:1] in 'IW']
    assert len(not_logs) == 1 and not_logs[0].startswith(
        f'sharedbert: error: could not write checkpoint 20 to {disk}/w/checkpoints: No space '
        'left on device'), done.stderr[-3000:]
    assert max(losses(disk / 'w')) == 20
    subprocess.run(['mount', '-o', 'remount,size=64m', str(disk)], check=True)
    done = run()
    assert done.returncode == 0, done.stderr[-3000:]
    assert max(losses(disk / 'w')) == 30
  finally:
    subprocess.run(['umount', str(disk)], capture_output=True)
