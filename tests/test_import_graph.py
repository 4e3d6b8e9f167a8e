"""The import graph of sharedbert: no cycle (issue #14), the library never reaches into
its lab (issue #45), and dependencies sit at the top of each file (issue #45).

Every import of a sharedbert module counts: at the top of a file and inside a function
(a function-level import hides a cycle from Python but not from the reader). The graph
is read from the source with ast (one test imports the package, in its own process).
"""

import ast
import os
import subprocess
import sys

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
  # Imported by the study.
  assert 'sharedbert.tasks.squad' in edges['sharedbert.lab.study']
  assert 'sharedbert.tasks.engine' in edges['sharedbert.tasks.glue_task']  # At the top.


def test_sharedbert_has_no_import_cycle():
  cycle = find_cycle(graph())
  assert cycle is None, 'import cycle: ' + ' -> '.join(cycle)


# ---------------------------------------------------------------------------------------
# The library and the lab (docs/architecture.md).

LAB = 'sharedbert.lab'
# The command-line dispatch: the only modules outside the lab that may load it.
DISPATCH = {'sharedbert.cli'}


def lab_imports_outside(edges: dict[str, set]) -> list[str]:
  """'core -> lab' for every import of the lab by a core module."""
  return sorted(f'{m} -> {d}' for m, ds in edges.items() for d in ds
                if not m.startswith(LAB) and m not in DISPATCH and
                (d == LAB or d.startswith(LAB + '.')))


def test_the_lab_check_catches_a_core_module_importing_the_lab():
  edges = {'sharedbert.train': {'sharedbert.lab.study_plan'},
           'sharedbert.lab.study': {'sharedbert.train'}, 'sharedbert.cli': {'sharedbert.lab'}}
  assert lab_imports_outside(edges) == ['sharedbert.train -> sharedbert.lab.study_plan']


def test_no_core_module_imports_the_lab():
  edges = graph()
  assert any(m.startswith(LAB + '.') for m in edges), 'the lab moved: update LAB'
  assert lab_imports_outside(edges) == [], (
      'the core (models, data, train, tasks, ...) must not import the lab (experiments, '
      'benchmarks); move the shared code into the core instead')


# ---------------------------------------------------------------------------------------
# Imports at the top.

# Imported where used, so that a command that does not need them does not load them:
# heavy (TensorFlow and tfds load for seconds), or optional (torch, transformers).
LAZY_MODULES = ('tensorflow', 'tensorflow_datasets', 'matplotlib', 'torch', 'transformers')
# cli.py loads a subcommand's module only when it runs.
LAZY_FILES = {'sharedbert/cli.py'}


def function_local_imports(source: str, name: str = '<source>') -> list[str]:
  """'line: module' for every import inside a function that is not of LAZY_MODULES."""
  out = []
  for fn in ast.walk(ast.parse(source, name)):
    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
      for node in ast.walk(fn):
        if isinstance(node, ast.Import):
          mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
          mods = ['.' * node.level + (node.module or '')]
        else:
          continue
        out += [f'{node.lineno}: {m}' for m in mods if m.split('.')[0] not in LAZY_MODULES]
  return sorted(set(out), key=lambda x: int(x.split(':')[0]))


def test_the_import_check_catches_a_function_local_import():
  source = ('import os\n'
            'def f():\n  from sharedbert import train\n  import tensorflow as tf\n'
            '  def g():\n    import numpy as np\n    from . import x\n')
  assert function_local_imports(source) == ['3: sharedbert', '6: numpy', '7: .']


def test_imports_sit_at_the_top_of_every_module():
  found = []
  for module, path in sorted(modules().items()):
    rel = os.path.relpath(path, ROOT).replace(os.sep, '/')
    if rel in LAZY_FILES or '/remote_code/' in rel:  # remote_code: torch, for transformers.
      continue
    with open(path, encoding='utf-8') as f:
      found += [f'{rel}:{x}' for x in function_local_imports(f.read(), rel)]
  assert found == [], 'imports inside functions (put them at the top):\n' + '\n'.join(found)



# ---------------------------------------------------------------------------------------
# Docstrings on the library's public surface.

def undocumented(module) -> list[str]:
  """Public functions and classes defined in `module`, and their public methods, that have
  no docstring (a method inherits its base class's, as inspect.getdoc reads it)."""
  import inspect
  out = []
  for name, obj in vars(module).items():
    if name.startswith('_') or getattr(obj, '__module__', None) != module.__name__:
      continue
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
      continue
    doc = obj.__doc__ or ''
    if inspect.isclass(obj) and doc.startswith(name + '('):
      doc = ''  # The signature dataclasses write for a class that has no docstring.
    if not doc.strip():
      out.append(name)
    if inspect.isclass(obj):
      for attr, member in vars(obj).items():
        if attr.startswith('_') or attr == 'setup':
          continue
        if isinstance(member, (classmethod, staticmethod)):
          member = member.__func__
        if isinstance(member, property):
          member = member.fget
        if inspect.isfunction(member) and not inspect.getdoc(getattr(obj, attr)):
          out.append(f'{name}.{attr}')
  return out


def test_the_librarys_public_functions_and_classes_have_docstrings():
  import importlib
  found = []
  for module in sorted(modules()):
    if module.startswith(LAB) or '.remote_code' in module:
      continue
    found += [f'{module}.{n}' for n in undocumented(importlib.import_module(module))]
  assert found == [], f'{len(found)} without a docstring:\n' + '\n'.join(found)


def fresh_python(code: str) -> subprocess.CompletedProcess:
  """`code` run by a new interpreter in the repository root (nothing imported yet)."""
  return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                        cwd=ROOT, check=True)


def test_import_sharedbert_is_light_and_restore_is_a_function():
  """`import sharedbert` loads neither JAX nor TensorFlow; `sharedbert.restore` is the
  function (PEP 562: loaded on first use), and loading it imports JAX but not TensorFlow."""
  code = ('import sys, sharedbert\n'
          'assert "jax" not in sys.modules and "tensorflow" not in sys.modules\n'
          'f = sharedbert.restore\n'
          'print(f.__module__, f.__name__, callable(f), "jax" in sys.modules, '
          '"tensorflow" in sys.modules)\n'
          'import sharedbert.runs\n'
          'print(sharedbert.restore is sharedbert.runs.restore)\n')
  out = fresh_python(code).stdout.splitlines()
  assert out == ['sharedbert.runs restore True True False', 'True']


def test_the_entry_point_refuses_a_config_typo_before_jax_and_tensorflow_load():
  # `python -m sharedbert.main` loads the run's modules only once the flags are good
  # (cli.load_run): a typo is one line in about a second, not after TensorFlow's import.
  code = ('import sys\n'
          'from sharedbert import main\n'
          'sys.argv = ["sharedbert", "--config=configs/shared_base.py:tiny",\n'
          '            "--config.colour=red", "--workdir=/tmp/unused"]\n'
          'try:\n'
          '  main.parse_flags(sys.argv)\n'
          'except SystemExit as e:\n'
          '  print(e.code, "jax" in sys.modules, "tensorflow" in sys.modules)\n')
  done = fresh_python(code)
  assert done.stdout.split() == ['2', 'False', 'False'], done.stderr[-2000:]
  assert 'unknown config key config.colour' in done.stderr


def test_the_entry_point_checks_config_values_before_tensorflow_loads():
  # cli.load_run runs the mode's config checks (config/checks.py) before TensorFlow and the
  # mode's module load: a value out of range is one line after JAX's import alone.
  code = ('import sys, importlib.util\n'
          'from sharedbert import cli\n'
          'from sharedbert.errors import UserError\n'
          'def config(path, arg=None):\n'
          '  spec = importlib.util.spec_from_file_location("c", path)\n'
          '  module = importlib.util.module_from_spec(spec)\n'
          '  spec.loader.exec_module(module)\n'
          '  return module.get_config(arg)\n'
          'pretrain = config("configs/shared_base.py", "tiny")\n'
          'pretrain.ckpt.max_to_keep = 0\n'
          'finetune = config("configs/glue.py")\n'
          'for c in (pretrain, finetune):\n'
          '  try:\n'
          '    cli.load_run(c)\n'
          '  except UserError as e:\n'
          '    print(str(e).split()[0], "tensorflow" in sys.modules)\n')
  done = fresh_python(code)
  assert done.stdout.split() == ['ckpt.max_to_keep', 'False', 'config.init_from', 'False'], (
      done.stdout + done.stderr[-2000:])


def test_a_pretraining_command_builds_its_model_config_once(tmp_path):
  """Issue 55: the entry point's config check and the run's preflight each built (and
  checked) the ModelConfig. Counted through the real command line, up to the preflight's
  refusal of a missing corpus (so nothing trains)."""
  code = ('import atexit, sys\n'
          'from sharedbert.models import bert\n'
          'built = []\n'
          'plain = bert.ModelConfig.from_config.__func__\n'
          'bert.ModelConfig.from_config = classmethod(\n'
          '    lambda cls, m: built.append(1) or plain(cls, m))\n'
          'atexit.register(lambda: print("BUILT", len(built)))\n'
          'sys.argv = ["sharedbert", "--config=configs/shared_base.py:tiny",\n'
          f'            "--workdir={tmp_path}/w", "--config.data.corpus={tmp_path}/none.txt"]\n'
          'from sharedbert import main\n'
          'main.entry()\n')
  done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=ROOT,
                        env=dict(os.environ, JAX_PLATFORMS='cpu'))
  assert done.returncode == 2, done.stderr[-2000:]
  assert 'does not exist' in done.stderr  # Refused by the preflight, after both checks.
  assert done.stdout.splitlines()[-1] == 'BUILT 1'


def test_no_module_is_over_600_lines():
  """A module that long holds two things: split it where they part (issue 55)."""
  long = {name: n for name, path in modules().items()
          if (n := sum(1 for _ in open(path, encoding='utf-8'))) > 600}
  assert long == {}


def test_the_cores_public_functions_document_their_arguments_and_results():
  """Every public function of the core (the package less the lab and the exported PyTorch
  code) says what it returns in a `Returns:` section and, when it takes arguments, what
  they are in an `Args:` section (flax's lm1b documents each the same way)."""
  missing = []
  for module, path in sorted(modules().items()):
    if module.startswith(f'{PACKAGE}.lab') or '.remote_code' in module:
      continue
    with open(path, encoding='utf-8') as f:
      tree = ast.parse(f.read())
    for node in tree.body:
      if not isinstance(node, ast.FunctionDef) or node.name.startswith('_'):
        continue
      doc = ast.get_docstring(node) or ''
      a = node.args
      takes = bool(a.posonlyargs or a.args or a.vararg or a.kwonlyargs or a.kwarg)
      if 'Returns:' not in doc or (takes and 'Args:' not in doc):
        missing.append(f'{module}.{node.name}')
  assert missing == [], f'{len(missing)} without Args:/Returns::\n' + '\n'.join(missing)
