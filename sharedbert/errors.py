"""The one exception type for mistakes a user can fix (bad flags, paths, data).

Every command prints a UserError as one line (what, where, what to do) and exits 2,
without a traceback unless --verbose is given (`one_line_errors`; `sharedbert.main` adds
its own exit codes for divergence and preemption). Everything else is a bug and keeps its
traceback.
"""

import contextlib
import sys

USER_ERROR_EXIT_CODE = 2


class UserError(Exception):
  """A problem with the user's input, explained in one line."""


@contextlib.contextmanager
def one_line_errors(program: str, verbose: bool = False):
  """Turns a UserError raised inside into `PROGRAM: error: ...` on stderr and exit 2."""
  try:
    yield
  except UserError as e:
    if verbose:
      raise
    print(f'{program}: error: {e}', file=sys.stderr)
    sys.exit(USER_ERROR_EXIT_CODE)
