"""Directories written whole or not at all: a command writes into a temporary folder beside
its target and renames it into place, so an interrupted or refused write leaves either the
old directory or the new one, never half of one (the exporter and importer's folders)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile

from absl import logging

from sharedbert.errors import UserError


def fresh_dir(path: str, what: str):
  """Refuses a target that exists with files in it (nothing is overwritten).

  Args:
    path: the target.
    what: how the refusal names it ('--workdir').
  Raises:
    UserError: it has files.
  Returns:
    None.
  """
  if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
    raise UserError(f'{what} {path} exists and is not empty; choose a new one')


def publish(tmp: str, target: str):
  """Moves a fully written temporary directory to `target`.

  Args:
    tmp: the written folder.
    target: absent or empty.
  Returns:
    None.
  """
  if os.path.isdir(target):
    os.rmdir(target)  # Empty (checked before writing).
  os.rename(tmp, target)


def replace_dir(tmp: str, target: str):
  """Puts the fully written `tmp` in place of `target` (a directory, maybe with files): the
  old one is renamed aside first and removed last, so a failure in between leaves one of
  the two whole (the old one under .<name>.old-*, next to it).

  Args:
    tmp: the written folder.
    target: the folder it replaces.
  Returns:
    None.
  """
  if not os.path.lexists(target):
    os.rename(tmp, target)
    return
  old = temp_dir_beside(target, 'old')
  os.rename(target, os.path.join(old, 'previous'))
  os.rename(tmp, target)
  shutil.rmtree(old, ignore_errors=True)


# `.<name>.tmp-<pid>-*` and `.<name>.old-<pid>-*`: the folders an export works in.
_WORK_DIR = re.compile(r'^\..+\.(tmp|old)-(\d+)-')


def _pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # Someone else's live process.
    return True
  return True


def remove_stale_work_dirs(parent: str) -> list[str]:
  """Removes the work folders that an interrupted export left in `parent` (their process is
  gone); a live export's are kept. Returns what was removed.

  Args:
    parent: the folder.
  Returns:
    The names removed.
  """
  removed = []
  for name in os.listdir(parent) if os.path.isdir(parent) else []:
    m = _WORK_DIR.match(name)
    if m and not _pid_alive(int(m.group(2))):
      shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
      removed.append(name)
      logging.info('removed %s, left by an interrupted export', os.path.join(parent, name))
  return removed


def temp_dir_beside(target: str, kind: str = 'tmp') -> str:
  """A new empty folder beside `target` (.<name>.<kind>-<pid>-*), after removing those an
  interrupted process left there.

  Args:
    target: the final folder.
    kind: 'tmp' or 'old'.
  Returns:
    The new folder's path.
  """
  parent = os.path.dirname(os.path.abspath(target))
  os.makedirs(parent, exist_ok=True)
  remove_stale_work_dirs(parent)
  return tempfile.mkdtemp(
      prefix=f'.{os.path.basename(os.path.abspath(target))}.{kind}-{os.getpid()}-', dir=parent)
