"""Ctrl-C, full disks and oversized batches outside pretraining's loop (issue 44, items 2, 5
and 6): real signals to real processes, a real small tmpfs, a real compiled step."""

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from sharedbert import pretrain_step
from sharedbert import train
from sharedbert.utils import workdir as workdir_lib
from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.errors import UserError
from test_finetune import sst2_dir, tiny_pretrain_config  # noqa: F401 (a fixture)
from test_write_failures import _mount_tmpfs
# A failed test leaves no command running on (one took a core for minutes): what start()
# launched is killed after each test, by test_resume's autouse fixture.
from test_resume import _STARTED, no_leftover_processes  # noqa: F401 (an autouse fixture)

REPO = pathlib.Path(__file__).resolve().parents[1]
ENV = dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=str(REPO))
TIMEOUT = 240


@pytest.fixture
def untrained(tmp_path):
  """A pretraining workdir with its config and vocabulary (GLUE from_scratch needs no more)."""
  workdir = tmp_path / 'untrained'
  workdir.mkdir()
  workdir_lib.write_config(tiny_pretrain_config(tmp_path), str(workdir))
  docs = (tmp_path / 'corpus.txt').read_text().split('\n\n')
  tokenizer_lib.save(tokenizer_lib.train(docs, 64, max_sentences=1000),
                     str(workdir / tokenizer_lib.VOCAB_FILE))
  return workdir


def glue_command(untrained, glue_dir, workdir, *extra):
  return [sys.executable, '-m', 'sharedbert.main', '--config=configs/glue.py:task=sst2,seeds=2',
          f'--config.init_from={untrained}', '--config.from_scratch=True',
          f'--config.data.glue_dir={glue_dir}', f'--workdir={workdir}', *extra]


def start(cmd, log):
  proc = subprocess.Popen(cmd, cwd=REPO, env=ENV, stdout=open(log, 'w'),
                          stderr=subprocess.STDOUT)
  _STARTED.append(proc)
  return proc


def wait_for(text, proc, log, timeout=TIMEOUT):
  deadline = time.time() + timeout
  while text not in log.read_text():
    assert proc.poll() is None, log.read_text()[-3000:]
    assert time.time() < deadline, f'no {text!r} in time'
    time.sleep(0.05)


def stopped_in_one_line(proc, log, program='sharedbert'):
  code = proc.wait(timeout=TIMEOUT)
  text = log.read_text()
  assert code == 130, text[-3000:]
  assert 'Traceback' not in text and 'Segmentation fault' not in text, text[-3000:]
  lines = [l for l in text.splitlines() if l.startswith(f'{program}: ')]
  assert len(lines) == 1 and 'stopped by Ctrl-C' in lines[0], text[-3000:]
  return lines[0]


def test_ctrl_c_while_fine_tuning_stops_at_a_step_and_the_rerun_finishes(
    untrained, sst2_dir, tmp_path):
  """It printed a traceback (GLUE had no handler); now: after the step, one line, exit 130,
  and the same command finishes the run."""
  workdir, log = tmp_path / 'ft', tmp_path / 'ft.log'
  cmd = glue_command(untrained, sst2_dir, workdir, '--config.num_epochs=40',
                     '--config.log_every_steps=1')
  proc = start(cmd, log)
  wait_for('seed 0 epoch 1: step 2/', proc, log)
  proc.send_signal(signal.SIGINT)
  line = stopped_in_one_line(proc, log)
  assert 'finished runs are kept' in line
  assert not (workdir / 'sst2' / 'seed_0' / 'metrics.json').exists()
  done = subprocess.run(glue_command(untrained, sst2_dir, workdir, '--config.num_epochs=1'),
                        cwd=REPO, env=ENV, capture_output=True, text=True, timeout=TIMEOUT)
  assert done.returncode == 0, done.stderr[-3000:]
  assert (workdir / 'sst2' / 'seed_1' / 'metrics.json').exists()


@pytest.fixture
def big_dev_dir(tmp_path):
  """SST-2 whose dev set takes seconds to score (20,000 rows), so that a signal can land
  in the middle of an evaluation."""
  from test_finetune import write_sst2
  write_sst2(tmp_path / 'glue_big', {'train': 64, 'dev': 20000}, seed=2)
  return tmp_path / 'glue_big'


def sigterm_stop(proc, log, within_s=10.0):
  """SIGTERM now; the command must exit 143 with one line within `within_s` seconds."""
  t0 = time.time()
  proc.send_signal(signal.SIGTERM)
  code = proc.wait(timeout=TIMEOUT)
  took = time.time() - t0
  text = log.read_text()
  assert code == 143, text[-3000:]
  assert took < within_s, f'stopped {took:.1f} s after SIGTERM'
  assert 'Traceback' not in text, text[-3000:]
  lines = [l for l in text.splitlines() if l.startswith('sharedbert: ')]
  assert len(lines) == 1 and 'stopped by SIGTERM' in lines[0], text[-3000:]
  return took


def test_sigterm_mid_epoch_stops_within_seconds_with_143(untrained, sst2_dir, tmp_path):
  """Issue 56, item 5: fine-tuning queued a whole epoch ahead and saw a SIGTERM only at the
  epoch's end. Now a few steps at most: exit 143 within 10 s, nothing of the seed written,
  and the rerun finishes."""
  workdir, log = tmp_path / 'ft', tmp_path / 'ft.log'
  proc = start(glue_command(untrained, sst2_dir, workdir, '--config.num_epochs=40',
                            '--config.log_every_steps=1'), log)
  wait_for('seed 0 epoch 1: step 2/', proc, log)
  sigterm_stop(proc, log)
  assert not (workdir / 'sst2' / 'seed_0' / 'metrics.json').exists()


def test_sigterm_during_the_last_evaluation_is_not_lost(untrained, big_dev_dir, tmp_path):
  """In the last epoch of the last seed a SIGTERM during evaluation was lost: results were
  written and the command exited 0. Now the evaluation stops within seconds, exit 143, and
  the seed is not recorded as finished (the rerun runs it)."""
  workdir, log = tmp_path / 'ft', tmp_path / 'ft.log'
  proc = start(glue_command(untrained, big_dev_dir, workdir, '--config.num_epochs=1',
                            '--config.seeds=1'), log)
  wait_for('sst2 seed 0 epoch 1: scoring', proc, log)
  sigterm_stop(proc, log)
  assert not (workdir / 'sst2' / 'seed_0' / 'metrics.json').exists()
  assert not (workdir / 'results.json').exists()


def test_ctrl_c_before_fine_tuning_compiles_or_while_it_loads_is_one_line(
    untrained, sst2_dir, tmp_path):
  """While Python loads (quit_at_once) and while the first step compiles (the flag is read
  after it): one line, exit 130, no traceback, no segfault."""
  for wait_text in ('', 'train examples'):
    workdir, log = tmp_path / f'ft{len(wait_text)}', tmp_path / f'ft{len(wait_text)}.log'
    proc = start(glue_command(untrained, sst2_dir, workdir), log)
    if wait_text:
      wait_for(wait_text, proc, log)
    else:
      time.sleep(3.0)  # Inside the imports, or just past them: one line either way.
    proc.send_signal(signal.SIGINT)
    stopped_in_one_line(proc, log)


WORKERS = textwrap.dedent('''
    import sys, time
    from sharedbert import interrupts
    from sharedbert.errors import one_line_errors
    from sharedbert.utils import workers

    def job(n):
      for _ in range(n * 20):  # A training loop: a step, then the check.
        time.sleep(0.05)
        interrupts.check('finished jobs are kept')
      return n

    if __name__ == '__main__':
      with one_line_errors('toy', trains=True):
        workers.run_all([1, 600, 600], job, lambda n: (n,), workers=2,
                        on_done=lambda n, r: print('done', r, flush=True))
''')


# A Ctrl-C whose KeyboardInterrupt lands in a finalizer, where Python prints "Exception
# ignored" and goes on (as in JAX's garbage-collector callback, where it let a benchmark run
# on for minutes): the command still stops, with its line and exit 130.
SWALLOWED = textwrap.dedent('''
    import os, signal, sys, time
    from sharedbert.errors import one_line_errors

    class Finalizer:
      def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)  # Handled here, inside __del__.

    with one_line_errors('toy', trains=sys.argv[1] == 'trains'):
      if sys.argv[1] == 'trains':
        os.kill(os.getpid(), signal.SIGINT)  # The first: a flag, read at a step boundary.
      finalizer = Finalizer()
      del finalizer
      print('went on', flush=True)
      time.sleep(60)  # A long compilation.
      print('finished', flush=True)
''')


@pytest.mark.parametrize('kind', ['at_once', 'trains'])
def test_a_ctrl_c_lost_in_a_finalizer_still_stops_the_command(tmp_path, kind):
  script = tmp_path / 'toy.py'
  script.write_text(SWALLOWED)
  started = time.time()
  done = subprocess.run([sys.executable, str(script), kind], cwd=REPO, env=ENV,
                        capture_output=True, text=True, timeout=TIMEOUT)
  assert done.returncode == 130, done.stderr[-3000:]
  assert 'Exception ignored' in done.stderr and 'went on' in done.stdout  # It was lost.
  assert 'finished' not in done.stdout and time.time() - started < 40
  assert done.stderr.strip().splitlines()[-1] == (
      'toy: stopped by Ctrl-C; finished work is kept; run the same command again to go on')


def test_ctrl_c_to_the_parent_alone_reaches_its_workers(tmp_path):
  """`kill -INT` of a study's parent did nothing while its workers trained on: the parent
  now passes the signal on, keeps what finished and exits 130 in one line."""
  script, log = tmp_path / 'toy.py', tmp_path / 'toy.log'
  script.write_text(WORKERS)
  proc = start([sys.executable, str(script)], log)
  wait_for('done 1', proc, log)
  time.sleep(1.0)  # The long jobs are running.
  proc.send_signal(signal.SIGINT)
  started = time.time()
  line = stopped_in_one_line(proc, log, program='toy')
  assert time.time() - started < 30  # Not the 30 s a long job would take to finish.
  assert 'finished runs are kept' in line
  assert 'done 600' not in log.read_text()


def test_fine_tuning_onto_a_full_disk_is_one_line_exit_4_and_leaves_no_partial_checkpoint(
    untrained, sst2_dir, tmp_path):
  """It ended in 152 lines ('sys.meta_path is None') with a partial checkpoint left."""
  disk = tmp_path / 'disk'
  if not _mount_tmpfs(disk, '300k'):  # Room for the config and vocabulary, not a model.
    pytest.skip('cannot mount a tmpfs here (needs root); CI runs as root')
  try:
    done = subprocess.run(glue_command(untrained, sst2_dir, disk / 'ft', '--config.num_epochs=1'),
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 4, done.stderr[-3000:]
    errors = [l for l in done.stderr.splitlines() if not l[:1] in 'IW']
    assert len(errors) == 1 and errors[0].startswith(
        'sharedbert: error: could not write the sst2 seed 0 model of epoch 1 to '), errors
    assert 'No space left on device' in errors[0]
    assert not list(disk.rglob('*orbax-checkpoint-tmp*'))
  finally:
    subprocess.run(['umount', str(disk)], capture_output=True)


def test_a_step_that_cannot_fit_is_refused_before_the_workdir_is_written(tmp_path,
                                                                         monkeypatch):
  """The compiled step's own memory analysis against what the device has (here a device
  said to have 1 KiB free): one line naming both, and no workdir."""
  monkeypatch.setattr(pretrain_step, 'memory_available', lambda device: (1024, 'the test device'))
  config = tiny_pretrain_config(tmp_path)
  workdir = tmp_path / 'run'
  with pytest.raises(UserError, match=r'the train step needs about .* GiB per device \(compiled '
                     r'memory analysis: .*temporaries .*\) but the test device has 0.0 GiB free; '
                     r'lower data.batch_size \(now 8\)'):
    train.train_and_evaluate(config, str(workdir))
  assert not workdir.exists()


def test_ctrl_c_in_a_command_that_does_not_train_stops_at_once(tmp_path):
  """A benchmark has no step boundary to stop at: Ctrl-C stops it where it is, in one line
  (not a flag that nothing reads)."""
  log = tmp_path / 'bench.log'
  proc = start([sys.executable, '-c', 'import sys; from sharedbert.cli import command; '
                'sys.exit(command())', 'bench', f'--out_json={tmp_path}/b.json',
                f'--out_md={tmp_path}/b.md'], log)
  wait_for('bench: small, standard: compiling', proc, log)
  proc.send_signal(signal.SIGINT)
  started = time.time()
  line = stopped_in_one_line(proc, log, program='sharedbert bench')
  assert time.time() - started < 30 and 'stopped by Ctrl-C' in line
  assert not (tmp_path / 'b.json').exists()
