"""Atomic file writes for every result a run leaves, local or remote (gs://).

A file is written to a temporary name beside it and renamed, so that a reader or a
resumed run never sees half of it; tf.io.gfile, so that any workdir tf can open works
(loaded on first use: a command that refuses its flags never imports TensorFlow).
"""

import json
import os

import numpy as np

from sharedbert.utils.paths import gfile


def json_default(x):
  """numpy scalars and arrays as their JSON values.

  Args:
    x: a value json cannot write.
  Returns:
    Its JSON value.
  Raises:
    TypeError: not a numpy value.
  """
  if isinstance(x, np.integer):
    return int(x)
  if isinstance(x, np.floating):
    return float(x)
  if isinstance(x, np.ndarray):
    return x.tolist()
  raise TypeError(f'not JSON serializable: {type(x)}')


def write_text(path: str, text) -> None:
  """Writes `text` (str, or bytes) to `path` atomically, creating its folder.

  Args:
    path: local or gs://.
    text: str or bytes.
  Returns:
    None.
  """
  path = os.fspath(path)
  folder = os.path.dirname(path)
  if folder:
    gfile().makedirs(folder)
  tmp = f'{path}.tmp{os.getpid()}'
  with gfile().GFile(tmp, 'wb' if isinstance(text, bytes) else 'w') as f:
    f.write(text)
  gfile().rename(tmp, path, overwrite=True)


def write_json(path: str, obj, *, indent: int = 1, sort_keys: bool = False) -> None:
  """`obj` as JSON (numpy values converted), one trailing newline, written atomically.

  Args:
    path: local or gs://.
    obj: the value.
    indent, sort_keys: as json.dumps'.
  Returns:
    None.
  """
  write_text(path, json.dumps(obj, indent=indent, sort_keys=sort_keys,
                              default=json_default) + '\n')


def read_json(path: str):
  """The JSON value in `path` (local or gs://).

  Args:
    path: local or gs://.
  Returns:
    The value.
  """
  with gfile().GFile(os.fspath(path)) as f:
    return json.load(f)


def read_jsonl(path: str) -> list:
  """The records of a JSON-lines file ([] when there is none); a line cut by a kill in
  mid-write is skipped.

  Args:
    path: local or gs://.
  Returns:
    The records.
  """
  if not gfile().exists(path):
    return []
  out = []
  with gfile().GFile(path) as f:
    for line in f:
      line = line.strip()
      if line:
        try:
          out.append(json.loads(line))
        except json.JSONDecodeError:
          pass
  return out


def exists(path: str) -> bool:
  """Whether `path` exists (local or gs://).

  Args:
    path: local or gs://.
  Returns:
    Whether it exists.
  """
  return gfile().exists(os.fspath(path))
