"""The one exception type for mistakes a user can fix (bad flags, paths, data).

Every command prints a UserError as one line (what, where, what to do) and exits 2,
without a traceback unless --verbose is given (`one_line_errors`; `sharedbert.main` adds
its own exit codes for divergence and preemption). Everything else is a bug and keeps its
traceback.
"""

import contextlib
import errno
import sys

from sharedbert import interrupts
from sharedbert.interrupts import exit_now  # noqa: F401 (sharedbert.main exits through it)

USER_ERROR_EXIT_CODE = 2
DIVERGED_EXIT_CODE = 3     # Too many non-finite steps in a row: restarting will not help.
WRITE_FAILED_EXIT_CODE = 4  # A file could not be written: a full disk, a quota, read-only.
# The OS errors of a write that cannot succeed, whatever library reports them.
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
_WRITE_WORDS = ('No space left on device', 'Disk quota exceeded', 'Read-only file system')


class UserError(Exception):
  """A problem with the user's input, explained in one line."""


# Kinds of UserError that the command line turns into their own exit codes (sharedbert.main).
# They live here, beside UserError, so that the entry point can name them without loading
# the modules that raise them (JAX, TensorFlow, orbax: seconds).

class WriteFailed(UserError):
  """A checkpoint, metrics or summary file could not be written (sharedbert.checkpoint)."""


class Unrestorable(UserError):
  """No step of the workdir restores (sharedbert.checkpoint). Tensorstore's readers of the
  damaged steps may still hold coroutines; a normal interpreter exit prints thousands of
  lines about them, so the command exits at once after its one line (sharedbert.main)."""


class Diverged(UserError):
  """optim.max_skipped_steps consecutive steps had a non-finite loss or gradient
  (sharedbert.train)."""


def write_failure(error: BaseException) -> str | None:
  """The OS's words when `error` (or what caused it) is a write the disk refused, else None.
  Libraries wrap it differently (safetensors: 'No space left on device (os error 28)').

  Args:
    error: any exception.
  Returns:
    The reason, or None.
  """
  while error is not None:
    if isinstance(error, OSError) and error.errno in _WRITE_ERRNOS:
      return f'{error.strerror}' + (f': {error.filename}' if error.filename else '')
    for words in _WRITE_WORDS:
      if words in str(error):
        return words
    error = error.__cause__ or error.__context__
  return None


@contextlib.contextmanager
def one_line_errors(program: str, verbose: bool = False, *, trains: bool = False):
  """Turns a UserError raised inside into `PROGRAM: error: ...` on stderr and exit 2, a
  write the disk refused (full, quota, read-only) into one line and exit 4, as in
  pretraining (the command removes its own temporary files before the error reaches here),
  and Ctrl-C into one line and exit 130: for a command that `trains`, a stop at the next
  step boundary (SIGTERM too: exit 143; sharedbert.interrupts), else at once.

  Args:
    program: the name the lines start with.
    verbose: show tracebacks of user errors.
    trains: Ctrl-C stops at the next step boundary.
  Returns:
    A context manager.
  """
  stopped = (f'{program}: stopped by Ctrl-C; finished work is kept; run the same command '
             'again to go on')
  try:
    with (interrupts.stop_on_signals(stopped) if trains else
          interrupts.interrupt_at_once(stopped)):
      yield
  except UserError as e:
    if verbose:
      raise
    print(f'{program}: error: {e}', file=sys.stderr)
    sys.exit(WRITE_FAILED_EXIT_CODE if isinstance(e, WriteFailed) else USER_ERROR_EXIT_CODE)
  except interrupts.Stopped as e:
    exit_now(f'{program}: {e}', e.exit_code)
  except KeyboardInterrupt:  # A command with no loop to stop at, or a second Ctrl-C.
    exit_now(stopped, interrupts.INTERRUPTED_EXIT_CODE)
  except Exception as e:  # pylint: disable=broad-except
    reason = write_failure(e)
    if verbose or reason is None:
      raise
    print(refused_write_line(program, reason), file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(WRITE_FAILED_EXIT_CODE)


def refused_write_line(program: str, reason: str) -> str:
  """The one line a command prints when the disk refused a write.

  Args:
    program: the command's name.
    reason: the OS's words.
  Returns:
    The line.
  """
  return (f'{program}: error: could not write: {reason}; free some space (or fix the '
          'permissions), then run the same command again')


