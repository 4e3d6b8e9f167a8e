"""One live run per workdir: an exclusive `flock` on WORKDIR/run.lock.

The run holds the lock from before it writes anything until it exits. The file names the
holder (pid, host, start time) so that a second run on the same workdir can say who has
it. The kernel drops a flock when its process dies, however it dies, so a lock file left
by a killed run (SIGKILL, a crash, a lost node) is stale and never blocks the next run.

Limits: on a multi-process launch only process 0 takes the lock. `flock` is local to one
machine (and to NFS clients that support it): on object stores (gs://, s3://) there is no
lock, and two runs given the same bucket path are not stopped.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time

from absl import logging

from sharedbert.errors import UserError

LOCK_FILE = 'run.lock'


def is_local(workdir: str) -> bool:
  """Whether `workdir` is on this machine (not a gs:// or other URL).

  Args:
    workdir: a path or URL.
  Returns:
    Whether it is local.
  """
  return '://' not in workdir


def _holder_text(path: str) -> str:
  try:
    with open(path) as f:
      text = f.read().strip()
  except OSError:
    text = ''
  return text or 'an unknown process'


class WorkdirLock:
  """An exclusive, non-blocking lock on one local workdir."""

  def __init__(self, workdir: str):
    self.workdir = workdir
    self.path = os.path.join(workdir, LOCK_FILE)
    self._fd: int | None = None
    self._created_workdir = False

  def acquire(self):
    """Takes the lock, creating the workdir if needed; UserError if a live run holds it."""
    self._created_workdir = not os.path.isdir(self.workdir)
    os.makedirs(self.workdir, exist_ok=True)
    while True:
      fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        os.close(fd)
        self._remove_workdir_if_created()
        raise UserError(
            f'workdir {self.workdir} is in use by another run ({_holder_text(self.path)}); '
            'wait for it to finish or stop it, or pass another --workdir') from None
      # A holder that was releasing may have unlinked the file between our open and our
      # flock: then we locked a file nobody else will see. Try again on the new one.
      try:
        same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
      except FileNotFoundError:
        same = False
      if same:
        break
      os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, (f'pid {os.getpid()} on host {socket.gethostname()}, started '
                  f'{time.strftime("%Y-%m-%d %H:%M:%S")}\n').encode())
    self._fd = fd

  def release(self):
    """Removes the lock file (while still holding the lock), then drops the lock."""
    if self._fd is None:
      return
    with contextlib.suppress(OSError):
      os.unlink(self.path)
    os.close(self._fd)
    self._fd = None
    self._remove_workdir_if_created()

  def _remove_workdir_if_created(self):
    # A run that failed before writing anything leaves no empty workdir behind.
    if self._created_workdir:
      with contextlib.suppress(OSError):
        os.rmdir(self.workdir)  # Only if empty.


@contextlib.contextmanager
def hold(workdir: str, *, enabled: bool = True):
  """Holds the workdir's lock for the duration of the block (no-op when not enabled).

  Args:
    workdir: the run's workdir.
    enabled: False: do nothing.
  Returns:
    A context manager.
  Raises:
    UserError: another live process holds it.
  """
  if not enabled:
    yield
    return
  if not is_local(workdir):
    logging.warning('workdir %s is not a local path: no lock protects it against a second '
                    'run on the same path', workdir)
    yield
    return
  lock = WorkdirLock(workdir)
  lock.acquire()
  try:
    yield
  finally:
    lock.release()
