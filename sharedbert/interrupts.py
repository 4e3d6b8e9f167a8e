"""Ctrl-C, SIGTERM and SIGHUP as a stop at the next step boundary, in every command that
trains (SIGHUP, the terminal closing, is handled as a preemption: a run whose terminal goes
away saves and stops instead of dying mid-write, and exits 129).

The signal handler only sets a flag: Python runs handlers between bytecodes of the main
thread, so a flag set during XLA compilation is seen after it, where raising in the
middle of it (Python's default KeyboardInterrupt) crashed the interpreter. Loops call
`check()` at their step boundaries; it raises `Stopped`, which every command prints as one
line and exits 128 + the signal: 130 (Ctrl-C), 143 (SIGTERM) or 129 (SIGHUP)
(errors.one_line_errors, sharedbert.main).
What a command keeps is its own: pretraining saves a checkpoint (train.py has its own
handler for that); GLUE keeps its finished seeds; the study and the probes their finished
runs. A second Ctrl-C stops at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

from absl import logging

INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT.
PREEMPTED_EXIT_CODE = 143    # 128 + SIGTERM: a scheduler may restart the same command.
HANGUP_EXIT_CODE = 129       # 128 + SIGHUP.
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_received: list[int] = []  # The signals seen since stop_on_signals was entered.


def signal_name(signum: int) -> str:
  """'Ctrl-C (SIGINT)', 'SIGHUP (the terminal closed)' or 'SIGTERM', for messages.

  Args:
    signum: a signal number.
  Returns:
    Its name for messages.
  """
  return {signal.SIGINT: 'Ctrl-C (SIGINT)',
          signal.SIGHUP: 'SIGHUP (the terminal closed)'}.get(signum, 'SIGTERM')


class Stopped(Exception):
  """A run stopped by a signal after saving what it keeps; `signum` says which."""

  def __init__(self, message: str, signum: int = signal.SIGTERM):
    super().__init__(message)
    self.signum = signum

  def __reduce__(self):  # Across processes (a worker's stop) with its signal.
    return type(self), (str(self), self.signum)

  @property
  def exit_code(self) -> int:
    """128 + the signal: 130 after a Ctrl-C, 143 after a SIGTERM, 129 after a SIGHUP."""
    return {signal.SIGINT: INTERRUPTED_EXIT_CODE,
            signal.SIGHUP: HANGUP_EXIT_CODE}.get(self.signum, PREEMPTED_EXIT_CODE)


# Python drops an exception raised inside a garbage-collector or weakref callback ("Exception
# ignored in: ..."): JAX runs one at every collection, so a Ctrl-C's KeyboardInterrupt can
# land there and stop nothing (a benchmark compiling went on for minutes). Whoever raises
# one for Ctrl-C also starts a timer: a process still alive this long after says its line
# and exits 130 itself. The usual path (the command catches the KeyboardInterrupt and
# exit_now) ends it well before.
SWALLOWED_AFTER_S = 5.0


def exit_now(line: str, code: int):
  """Prints `line` and exits with `code` without the interpreter's teardown: writer or
  compiler threads still running would print their own tracebacks (or crash) on the way
  out; what the command keeps is on disk already.

  Args:
    line: printed to stderr.
    code: the exit status.
  Returns:
    Never.
  """
  print(line, file=sys.stderr)
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)


def _keyboard_interrupt(line: str | None):
  """Raises KeyboardInterrupt; with `line`, exits with it if nothing has a moment later."""
  if line is not None:
    timer = threading.Timer(SWALLOWED_AFTER_S, exit_now, (line, INTERRUPTED_EXIT_CODE))
    timer.daemon = True
    timer.start()
  raise KeyboardInterrupt


def _handler(second_ctrl_c_line: str | None):
  def handle(signum, frame):
    del frame
    if signum == signal.SIGINT and signal.SIGINT in _received:
      # The second Ctrl-C: the user does not want to wait.
      _keyboard_interrupt(second_ctrl_c_line)
    if not _received:
      logging.warning('%s received: stopping at the end of this step (Ctrl-C again stops at '
                      'once)', signal_name(signum))
    _received.append(signum)
  return handle


def quit_at_once(program: str) -> None:
  """Until a command enters stop_on_signals (while Python loads and the flags are read,
  before anything is written), Ctrl-C quits with one line and exit 130, not a traceback
  from whatever import it lands in.

  Args:
    program: the name the line starts with.
  Returns:
    None.
  """
  def handle(signum, frame):
    del signum, frame
    print(f'{program}: stopped by Ctrl-C before any work began', file=sys.stderr)
    sys.stderr.flush()
    os._exit(INTERRUPTED_EXIT_CODE)
  if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, handle)


def _record(signum, frame):
  del frame
  _received.append(signum)


def flag_only() -> None:
  """In a worker process: signals only set the flag, for good (its parent, which also
  forwards them, decides when to stop; a KeyboardInterrupt in an idle worker would print a
  traceback).

  Returns:
    None.
  """
  _received.clear()
  for s in SIGNALS:
    signal.signal(s, _record)


@contextlib.contextmanager
def stop_on_signals(second_ctrl_c_line: str | None = None):
  """Within: SIGINT and SIGTERM set the flag that check() reads (main thread only; in any
  other thread, e.g. some notebook runners, Python keeps its own handling). A second Ctrl-C
  raises KeyboardInterrupt; a command that turns it into `second_ctrl_c_line` passes that
  line, said and exit 130 if the exception is lost (SWALLOWED_AFTER_S).

  Args:
    second_ctrl_c_line: as above, or None.
  Returns:
    A context manager.
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  previous = {s: signal.signal(s, _handler(second_ctrl_c_line)) for s in SIGNALS}
  _received.clear()
  try:
    yield
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)


@contextlib.contextmanager
def interrupt_at_once(line: str | None = None):
  """Within: Ctrl-C raises KeyboardInterrupt where it lands (as Python's own handler does),
  for a command with no training loop to stop at (benchmarks, conversions, reports). A
  command that turns it into `line` passes that line: said, and exit 130, if the exception
  is lost (SWALLOWED_AFTER_S).

  Args:
    line: as above, or None.
  Returns:
    A context manager.
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  previous = signal.signal(signal.SIGINT, lambda signum, frame: _keyboard_interrupt(line))
  try:
    yield
  finally:
    signal.signal(signal.SIGINT, previous)


def requested() -> int | None:
  """The first signal received within stop_on_signals, or None.

  Returns:
    The signal number, or None.
  """
  return _received[0] if _received else None


def check(kept: str) -> None:
  """Raises Stopped if a signal was received; `kept` says what a rerun finds (e.g. 'the
  finished seeds are kept').

  Args:
    kept: as above.
  Raises:
    Stopped: a signal was received.
  Returns:
    None.
  """
  signum = requested()
  if signum is not None:
    raise Stopped(f'stopped by {signal_name(signum)}; {kept}; run the same command again to '
                  'go on', signum)


class StepFlag:
  """Remembers a SIGTERM so that the loop can save and exit at a step boundary.

  Only for a single process: with several, JAX's preemption service owns SIGTERM and the
  processes agree on the step to save at (`Checkpointer.reached_preemption`); a handler
  here would replace JAX's, and processes seeing the signal at different steps would
  save at different steps.
  """

  def __init__(self, enabled: bool = True):
    self.enabled = enabled
    self.raised = False
    self._previous = None

  def __enter__(self):
    self.signum = None
    self._previous = {}
    if not self.enabled:
      return self
    if requested():  # Seen by the command's own handler before this one.
      self.raised, self.signum = True, requested()
    try:
      for signum in SIGNALS:  # Ctrl-C, a preemption, the terminal closing.
        self._previous[signum] = signal.signal(signum, self._handle)
    except ValueError:  # Not the main thread (e.g. some notebook runners): no handler.
      self._previous = {}
    return self

  def _handle(self, signum, frame):
    logging.warning('%s received: saving a checkpoint at the end of this step',
                    signal_name(signum))
    self.raised = True
    self.signum = self.signum or signum

  def __exit__(self, *exc):
    for signum, previous in self._previous.items():
      signal.signal(signum, previous)
