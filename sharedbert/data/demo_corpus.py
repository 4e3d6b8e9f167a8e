"""The embedded `demo` corpus: English docstrings of the installed Python standard library.

It needs no download and puts no third-party text into this repository: the text is read
at run time from the standard library's own source files (parsed with `ast`, never
imported), so it is whatever Python the user runs (PSF licence). Each docstring paragraph
of at least `MIN_CHARS` characters is a document; the order is fixed (sorted paths), so a
given Python version always yields the same corpus.
"""

from __future__ import annotations

import ast
import os
import sysconfig

MIN_CHARS = 100
# Folders of the standard library that are tests, tools or vendored code, not docs.
_SKIP_DIRS = {'test', 'tests', 'idlelib', 'site-packages', 'dist-packages', 'lib2to3',
              'turtledemo', 'ensurepip', '__pycache__', 'pydoc_data', 'tkinter'}


def stdlib_dir() -> str:
  """The folder of Python's standard library (the demo corpus reads its docstrings).

  Returns:
    The folder.
  """
  return sysconfig.get_paths()['stdlib']


def _docstrings(tree: ast.AST):
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      doc = ast.get_docstring(node, clean=True)
      if doc:
        yield doc


def documents(max_chars: int | None = None) -> list[str]:
  """Returns the demo corpus as a list of documents (plain text paragraphs).

  Args:
    max_chars: stop after about this many characters (None: all).
  Returns:
    The documents.
  """
  docs, total = [], 0
  root = stdlib_dir()
  for dirpath, dirnames, filenames in os.walk(root):
    dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith('.'))
    for name in sorted(filenames):
      if not name.endswith('.py'):
        continue
      try:
        with open(os.path.join(dirpath, name), encoding='utf-8') as f:
          tree = ast.parse(f.read())
      except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        continue
      for doc in _docstrings(tree):
        for para in doc.split('\n\n'):
          para = ' '.join(para.split())
          if len(para) >= MIN_CHARS and para.isascii() and '>>>' not in para:
            docs.append(para)
            total += len(para)
            if max_chars and total >= max_chars:
              return docs
  return docs
