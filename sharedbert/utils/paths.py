"""Paths as committed reports show them: never absolute, so no machine's layout leaks in.

  * a relative path is shown as given (relative to where the command ran; the README's
    commands run from the repository root);
  * an absolute path inside the repository: relative to the repository root (`docs/x`);
  * an absolute path inside the workdir: `W/<path in the workdir>`;
  * any other absolute path: relative to whichever of the two is nearer (fewer `..`
    steps; the repository on a tie): `../data/corpus`, or `W/../data/corpus`.

Names that are not file paths (`demo`, `tfds:wikipedia/...`, `gs://...`) are relative or
contain '://', and pass through unchanged.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
from typing import Optional

# sharedbert/utils/paths.py -> the repository root, three levels up.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Files:
  """tf.io.gfile's functions for paths that may be local or remote (gs://...): a local path
  is served by the os module, a URL by tf.io.gfile. So opening a run on local disk imports no
  TensorFlow (which, loaded beside some packages, e.g. triton, crashes the process), and
  object stores still work as before."""

  @staticmethod
  def _tf(path) -> bool:
    return '://' in os.fspath(path)

  def _remote(self):
    import tensorflow as tf
    return tf.io.gfile

  def exists(self, path) -> bool:
    return self._remote().exists(path) if self._tf(path) else os.path.exists(path)

  def isdir(self, path) -> bool:
    return self._remote().isdir(path) if self._tf(path) else os.path.isdir(path)

  def listdir(self, path) -> list[str]:
    return self._remote().listdir(path) if self._tf(path) else os.listdir(path)

  def glob(self, pattern) -> list[str]:
    return self._remote().glob(pattern) if self._tf(pattern) else glob.glob(pattern)

  def makedirs(self, path) -> None:
    if self._tf(path):
      return self._remote().makedirs(path)
    os.makedirs(path, exist_ok=True)

  def GFile(self, path, mode: str = 'r'):  # pylint: disable=invalid-name
    if self._tf(path):
      return self._remote().GFile(path, mode)
    return open(path, mode, **({} if 'b' in mode else {'encoding': 'utf-8'}))

  def rename(self, src, dst, overwrite: bool = False) -> None:
    if self._tf(src) or self._tf(dst):
      return self._remote().rename(src, dst, overwrite=overwrite)
    if not overwrite and os.path.exists(dst):
      raise FileExistsError(dst)
    os.replace(src, dst)

  def copy(self, src, dst, overwrite: bool = False) -> None:
    if self._tf(src) or self._tf(dst):
      return self._remote().copy(src, dst, overwrite=overwrite)
    if not overwrite and os.path.exists(dst):
      raise FileExistsError(dst)
    shutil.copyfile(src, dst)


_FILES = _Files()


def gfile() -> _Files:
  """Files that may be local or gs:// (tf.io.gfile's interface; TensorFlow only for URLs).

  Returns:
    The module's _Files.
  """
  return _FILES


def _within(path: str, base: str) -> bool:
  return os.path.commonpath([path, base]) == base


def _ups(rel: str) -> int:
  return rel.split(os.sep).count('..')


def display(path, *, workdir: Optional[str] = None, root: str = REPO_ROOT) -> str:
  """`path` as a report shows it (see the module docstring).

  Args:
    path: a path.
    workdir: shown as W when `path` is under it.
    root: the repository, shown relative to.
  Returns:
    The text.
  """
  path = os.fspath(path)
  if not path or '://' in path or not os.path.isabs(path):
    return path
  path, root = os.path.normpath(path), os.path.normpath(os.path.abspath(root))
  work = os.path.normpath(os.path.abspath(workdir)) if workdir else None
  if _within(path, root) and not (work and _within(work, root) and _within(path, work)):
    return os.path.relpath(path, root)
  if work and _within(path, work):
    rel = os.path.relpath(path, work)
    return 'W' if rel == '.' else os.path.join('W', rel)
  from_root = os.path.relpath(path, root)
  if work:
    from_work = os.path.relpath(path, work)
    if _ups(from_work) < _ups(from_root):
      return os.path.join('W', from_work)
  return from_root


def display_command(argv) -> str:
  """A command line with every absolute path in it (`--flag=/x`, `--flag /x`) shown by
  `display`; argv[0] becomes `python -m <module>` where the caller puts it.

  Args:
    argv: the command line.
  Returns:
    The text.
  """
  out = []
  for arg in argv:
    if arg.startswith('-') and '=' in arg:
      flag, value = arg.split('=', 1)
      arg = f'{flag}={display(value)}'
    else:
      arg = display(arg)
    out.append(shlex.quote(arg))
  return ' '.join(out)
