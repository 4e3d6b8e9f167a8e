r"""The entry point: `python -m sharedbert.main --config=CONFIG[:ARG] --workdir=DIR`.

  --config   an ml_collections config file with get_config(arg), e.g.
             configs/shared_base.py:tiny; override any field with --config.a.b=value.
  --workdir  where the run writes everything (config, vocabulary, metrics, checkpoints);
             running the same command again resumes from the latest checkpoint.
  --verbose  show the full traceback of a user error.

Dispatches on config.mode: 'pretrain' (sharedbert.train), 'finetune' (sharedbert.tasks.finetune,
configs/glue.py). Exit codes:
  0    done.
  2    a user error: a bad flag, config value, path or workdir, said in one line on stderr
       (the traceback with --verbose); the workdir is left as it was.
  3    stopped after optim.max_skipped_steps consecutive non-finite steps, or the run's
       last steps were non-finite; the last good checkpoint is kept (lower optim.lr, then
       run the same command to resume). No checkpoint holds a non-finite value.
  4    a checkpoint or the metrics could not be written (disk full, no permission, a
       quota): stopped at once, with one line on stderr; the last finalised checkpoint is
       kept, and the same command resumes from it once there is room.
  130  stopped by Ctrl-C (SIGINT): saved as at a preemption, below.
  143  preempted (SIGTERM, or orbax's preemption notice) after saving a checkpoint at the
       current step: run the same command again to resume.
A run killed outright (SIGKILL, a lost node) resumes from its last checkpoint when the
same command is run again.
"""

from __future__ import annotations

if __name__ == '__main__':  # First: a Ctrl-C while the imports below load is one line.
  from sharedbert import interrupts as _interrupts
  _interrupts.quit_at_once('sharedbert')

import sys

from absl import app
from absl import flags
from ml_collections import config_flags

from sharedbert import cli
from sharedbert import errors
from sharedbert import interrupts
from sharedbert.errors import (DIVERGED_EXIT_CODE, USER_ERROR_EXIT_CODE,
                               WRITE_FAILED_EXIT_CODE, UserError)

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file('config', None, 'Experiment config file (see configs/).',
                                lock_config=True)
flags.DEFINE_string('workdir', None, 'Directory for everything this run writes.')
flags.DEFINE_bool('verbose', False, 'Show tracebacks of user errors.')
flags.mark_flags_as_required(['config', 'workdir'])


SECOND_CTRL_C = ('sharedbert: stopped by a second Ctrl-C; finished work is kept; run the '
                 'same command again to go on')


def _quiet_closed_event_loops(hook):
  """sys.excepthook without the 'Event loop is closed' errors that tensorstore's callbacks
  print (through PyErr_Print) when an orbax write fails and its event loop is gone: the
  failure itself is said in one line (checkpoint.WriteFailed)."""
  def quiet(kind, value, tb):
    if not (kind is RuntimeError and str(value) == 'Event loop is closed'):
      hook(kind, value, tb)
  return quiet


def main(argv):
  """absl's main: runs --config in --workdir, turning errors into exit codes (the module
  docstring).

  Args:
    argv: absl's (the program name only).
  Returns:
    None.
  """
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if not FLAGS.verbose:
    sys.excepthook = _quiet_closed_event_loops(sys.excepthook)
  try:
    # JAX, TensorFlow and the run's modules load here, once the flags are known to be
    # good, and before the run's signal handling: a Ctrl-C while they load quits at once.
    run = cli.load_run(FLAGS.config)
    with interrupts.stop_on_signals(SECOND_CTRL_C):
      run(FLAGS.workdir)
  except errors.WriteFailed as e:
    if FLAGS.verbose:
      raise
    # Orbax's writer threads may still hold the failed save; a normal interpreter exit
    # would wait on them and print their tracebacks. Finalised checkpoints are on disk.
    errors.exit_now(f'sharedbert: error: {e}', WRITE_FAILED_EXIT_CODE)
  except UserError as e:
    if FLAGS.verbose:
      raise
    code = DIVERGED_EXIT_CODE if isinstance(e, errors.Diverged) else USER_ERROR_EXIT_CODE
    if isinstance(e, errors.Unrestorable):
      # Nothing was written; skip the interpreter's teardown of tensorstore's readers.
      errors.exit_now(f'sharedbert: error: {e}', code)
    print(f'sharedbert: error: {e}', file=sys.stderr)
    sys.exit(code)
  except interrupts.Stopped as e:  # Pretraining's train.Preempted, or a GLUE or study stop.
    print(f'sharedbert: {e}', file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(e.exit_code)  # 143 for SIGTERM, 130 for Ctrl-C.
  except OSError as e:  # A write the disk refused outside a checkpoint (GLUE's files).
    reason = errors.write_failure(e)
    if FLAGS.verbose or reason is None:
      raise
    errors.exit_now(errors.refused_write_line('sharedbert', reason), WRITE_FAILED_EXIT_CODE)
  except KeyboardInterrupt:  # A second Ctrl-C: at once, whatever was running.
    errors.exit_now(SECOND_CTRL_C, interrupts.INTERRUPTED_EXIT_CODE)


# Flag and config mistakes: one line and exit 2, before main() runs (sharedbert/cli.py).
parse_flags = cli.flags_parser('sharedbert', 'sharedbert.main')


def entry():
  """The console entry point of `python -m sharedbert.main`.

  Returns:
    None.
  """
  app.run(main, flags_parser=parse_flags)


if __name__ == '__main__':
  entry()
