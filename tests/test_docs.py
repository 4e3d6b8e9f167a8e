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


# The committed studies: report.md is what the current code renders from summary.json, and
# the README says what the reports say.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG = os.path.join(ROOT, 'docs', 'study_cpu_long')
ROTARY = os.path.join(ROOT, 'docs', 'study_cpu_rotary')
REFRESH = {LONG: 'python tools/refresh_long_report.py --summary=docs/study_cpu_long/summary.json',
           ROTARY: 'python -m sharedbert.lab.study ... --report_only, then copy it'}


def _read(*parts) -> str:
  with open(os.path.join(*parts), encoding='utf-8') as f:
    return f.read()


def _rotary_summary_folder() -> str:
  """The finished reference run's folder, or the snapshot while it runs."""
  final = os.path.join(ROTARY, 'summary.json')
  return ROTARY if os.path.exists(final) else os.path.join(ROTARY, 'snapshot')


def _figures(folder: str, names) -> tuple:
  return tuple(n for n in names if os.path.isfile(os.path.join(folder, n)))


def test_committed_study_reports_are_rendered_from_their_summaries():
  from sharedbert.lab import study_long_report
  from sharedbert.lab import study_rotary_report
  from sharedbert.models.params import load_config_file
  from sharedbert.utils import jsonio
  config = load_config_file(os.path.join(ROOT, 'configs', 'study.py'), 'cpu_long,data=unused')
  summary = jsonio.read_json(os.path.join(LONG, 'summary.json'))
  figures = _figures(LONG, (study_long_report.HORIZON_PNG, study_long_report.CURVES_PNG))
  assert study_long_report.render(config, summary, figures) == _read(LONG, 'report.md'), (
      f'docs/study_cpu_long/report.md is stale: {REFRESH[LONG]}')
  folder = _rotary_summary_folder()
  summary = jsonio.read_json(os.path.join(folder, 'summary.json'))
  figures = _figures(folder, (study_rotary_report.ARMS_PNG,))
  assert study_rotary_report.render(summary, figures) == _read(folder, 'report.md'), (
      f'{os.path.relpath(folder, ROOT)}/report.md is stale: {REFRESH[ROTARY]}')


def _bullet(text: str, start: str, end: str) -> str:
  return ' '.join(text[text.index(start):text.index(end)].split())


def test_the_readme_and_study_doc_state_the_rotary_answer_its_summary_gives():
  from sharedbert.lab import study_rotary_report
  from sharedbert.utils import jsonio
  summary = jsonio.read_json(os.path.join(_rotary_summary_folder(), 'summary.json'))
  sentence = study_rotary_report.readme_sentence(summary)
  if not os.path.exists(os.path.join(ROTARY, 'summary.json')):
    sentence = 'no result is claimed yet'  # The snapshot is partial: nothing is claimed.
  readme = _bullet(_read(ROOT, 'README.md'), '- **The rotary study**', '- **The long study**')
  assert sentence in readme, f'README\'s rotary study bullet should say: {sentence}'
  doc = _read(ROOT, 'docs', 'study.md')
  doc = _bullet(doc, '## The rotary study', '## The pretraining verdict')
  assert sentence.lower() in doc.lower(), f'docs/study.md\'s rotary section should say: {sentence}'


def test_every_figure_of_the_readme_long_study_bullet_is_in_a_report():
  """The bullet quotes the long study's report and the rotary study's re-read of its
  1,000-step point; a figure found in neither is stale or mistyped."""
  readme = _bullet(_read(ROOT, 'README.md'), '- **The long study**', '- **The controlled study**')
  reports = (_read(LONG, 'report.md') + _read(_rotary_summary_folder(), 'report.md'))
  reports = reports.replace('−', '-')
  figures = [n.replace('−', '-') for n in re.findall(r'[-+−]?\d+\.\d{3}\b', readme)]
  assert len(figures) > 10
  missing = [n for n in figures if n not in reports]
  assert not missing, f'in the README, in no report: {missing}'
