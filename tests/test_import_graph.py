"""The import graph of sharedbert has no cycle (issue #14).

Every import of a sharedbert module counts: at the top of a file and inside a function
(a function-level import hides a cycle from Python but not from the reader). The graph
is read from the source with ast; nothing is imported.
"""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = 'sharedbert'


def modules() -> dict[str, str]:
  """Module name -> file, for every .py under sharedbert/."""
  out = {}
  for folder, _, files in os.walk(os.path.join(ROOT, PACKAGE)):
    for name in files:
      if name.endswith('.py'):
        path = os.path.join(folder, name)
        parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
        if parts[-1] == '__init__':
          parts = parts[:-1]
        out['.'.join(parts)] = path
  return out


def imports_of(path: str, known: set) -> set:
  """The sharedbert modules a file imports (`from pkg import mod` names the module)."""
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read(), path)
  out = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      out.update(a.name for a in node.names if a.name in known)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      for a in node.names:
        full = f'{node.module}.{a.name}'
        if full in known:
          out.add(full)
        elif node.module in known:
          out.add(node.module)
  return out


def graph() -> dict[str, set]:
  mods = modules()
  known = set(mods)
  # A package's __init__ is not an edge of its submodules (importing a.b runs a first).
  return {m: {d for d in imports_of(p, known) if d != m and not m.startswith(d + '.')}
          for m, p in mods.items()}


def find_cycle(edges: dict[str, set]):
  """One cycle as a list of modules, or None (depth-first search)."""
  state, stack = {}, []

  def visit(m):
    state[m] = 'open'
    stack.append(m)
    for d in sorted(edges.get(m, ())):
      if state.get(d) == 'open':
        return stack[stack.index(d):] + [d]
      if d not in state:
        found = visit(d)
        if found:
          return found
    stack.pop()
    state[m] = 'done'
    return None

  for m in sorted(edges):
    if m not in state:
      found = visit(m)
      if found:
        return found
  return None


def test_the_finder_finds_a_cycle():
  assert find_cycle({'a': {'b'}, 'b': {'c'}, 'c': {'a'}}) == ['a', 'b', 'c', 'a']
  assert find_cycle({'a': {'b', 'c'}, 'b': {'c'}, 'c': set()}) is None


def test_the_graph_sees_function_level_imports():
  edges = graph()
  # Imported inside run_squad.
  assert 'sharedbert.tasks.squad' in edges['sharedbert.experiments.study']
  assert 'sharedbert.tasks.engine' in edges['sharedbert.tasks.glue_task']  # At the top.


def test_sharedbert_has_no_import_cycle():
  cycle = find_cycle(graph())
  assert cycle is None, 'import cycle: ' + ' -> '.join(cycle)
