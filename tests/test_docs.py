"""The config reference (docs/configs.md) and the code agree: every `model.*` key it
documents is a field of ModelConfig, and every field is documented (a row once described a
key that the code never had)."""

import dataclasses
import os
import re

from sharedbert.models.bert import ModelConfig

REFERENCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs',
                         'configs.md')


def documented_model_keys() -> set:
  """Keys in the first cell of the config reference's rows: `model.x`, `model.{a,b}`."""
  with open(REFERENCE, encoding='utf-8') as f:
    text = f.read()
  section = text[text.index('## Config reference'):]
  keys = set()
  for line in section.splitlines():
    if not line.startswith('| `model.'):
      continue
    first_cell = line.split('|')[1]
    for name in re.findall(r'`model\.([^`]+)`', first_cell):
      keys.update(name.strip('{}').split(',') if name.startswith('{') else [name])
  return keys


def test_the_reference_documents_exactly_the_model_keys():
  # variant_settings holds a variant's own keys, which configs set flat (model.<name>): the
  # reference documents those of every variant of the package.
  from sharedbert.convert.hf_custom import EXPORTABLE
  from sharedbert.models import attention as attention_lib
  fields = {f.name for f in dataclasses.fields(ModelConfig)} - {'variant_settings'}
  fields |= {name for v in EXPORTABLE for name in attention_lib.VARIANTS[v].settings}
  documented = documented_model_keys()
  assert documented - fields == set(), 'documented but not in ModelConfig or a variant'
  assert fields - documented == set(), 'in ModelConfig or a variant but not documented'


# Paths of one machine (a virtual environment beside the checkout, a home or work folder):
# a reader's machine has none of them. Examples such as /tmp/run1 in commands stay.
MACHINE_PATHS = re.compile(r'(?<![\w.])(/work/|/root/|/home/\w|/Users/\w)|hfvenv|\.\./\.\./root')


def test_docs_and_benchmark_results_name_no_machine_path():
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  files = [os.path.join(root, 'BENCHMARKS.md')]
  for folder in ('docs', 'bench'):
    for dirpath, _, names in os.walk(os.path.join(root, folder)):
      files += [os.path.join(dirpath, n) for n in names
                if n.endswith(('.md', '.json')) and not (folder == 'bench' and n.endswith('.md'))]
  found = []
  for path in files:
    with open(path, encoding='utf-8') as f:
      for number, line in enumerate(f, 1):
        if MACHINE_PATHS.search(line):
          found.append(f'{os.path.relpath(path, root)}:{number}: {line.strip()[:120]}')
  assert not found, '\n'.join(found)


def test_every_documented_module_command_exists():
  """`python -m sharedbert...` and `sharedbert SUBCOMMAND` in the README, docs, configs,
  launchers and scripts name modules that run and subcommands that exist (the library/lab
  move renamed modules: issue 45)."""
  import glob
  import importlib.util
  from sharedbert import cli
  root = os.path.dirname(os.path.dirname(REFERENCE))
  files = [os.path.join(root, 'README.md')] + sorted(
      glob.glob(os.path.join(root, 'docs', '**', '*.md'), recursive=True) +
      glob.glob(os.path.join(root, 'configs', '*.py')) +
      glob.glob(os.path.join(root, 'launch', '*')) +
      glob.glob(os.path.join(root, 'bench', '*.sh')))
  modules, subcommands = set(), set()
  for path in files:
    with open(path, encoding='utf-8') as f:
      text = f.read()
    modules.update(re.findall(r'python -m (sharedbert[\w.]*)', text))
    subcommands.update(re.findall(r'`sharedbert ([a-z_]+)[ `]', text))
  assert 'sharedbert.main' in modules and 'study' in subcommands
  for name in sorted(modules):
    spec = importlib.util.find_spec(name)
    assert spec is not None, f'documented `python -m {name}` names no module'
    if spec.submodule_search_locations:  # A package runs its __main__.
      assert importlib.util.find_spec(name + '.__main__'), f'{name} has no __main__'
    else:
      with open(spec.origin, encoding='utf-8') as f:
        assert "__name__ == '__main__'" in f.read(), f'python -m {name} would do nothing'
  unknown = sorted(s for s in subcommands if s not in cli.SUBCOMMANDS and s != 'run')
  assert unknown == [], f'documented subcommands that do not exist: {unknown}'
