"""GLUE task registry and readers that turn either source into plain `Example`s.

Two sources, one interface: the `glue_data` directory written by the widely used
download_glue_data.py (offline-friendly, what most BERT papers used), or TFDS
`glue/<task>` (needs a prepared TFDS data dir, since there is no network here).
Both give the same labels: integers in TFDS order (so a model trained from one
source can be scored on the other), floats for STS-B, None for unlabeled test.

The TSVs are NOT CSV: quotes are literal text (MRPC/STS-B sentences start with or
contain unbalanced `"`), so rows are split on tabs only and lines on '\\n' only
(str.splitlines would also split on \\x1c, \\x85, U+2028... which can occur in text).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from typing import Optional, Union

from sharedbert.errors import UserError
from sharedbert.utils.paths import gfile as _gfile  # glue_dir may be gs://.

Label = Union[int, float, None]


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """Everything the pipeline needs to know about one GLUE task.

  `label_names` follow TFDS order, which defines the integer labels everywhere.
  `tsv_*` are header names in the glue_data TSVs; `tfds_*` are TFDS feature names.
  """
  name: str
  glue_dir_name: str
  tfds_name: str
  num_labels: int
  is_regression: bool
  label_names: tuple[str, ...]
  dev_splits: tuple[str, ...]
  test_splits: tuple[str, ...]
  tfds_text_fields: tuple[str, ...]  # 1 (single sentence) or 2 (pair)
  tsv_text_columns: tuple[str, ...]
  tsv_label_column: Optional[str]
  metric_names: tuple[str, ...]
  # Submission labels: the GLUE server wants label strings for the NLI tasks and
  # 0/1 for the others (STS-B: floats).
  submission_uses_label_names: bool = False
  train_splits: tuple[str, ...] = ('train',)

  @property
  def splits(self) -> tuple[str, ...]:
    """Every split of the task: train, dev and test, in that order."""
    return self.train_splits + self.dev_splits + self.test_splits

  @property
  def is_pair(self) -> bool:
    """Whether an example is a pair of texts (MRPC, QQP, MNLI, ...)."""
    return len(self.tfds_text_fields) == 2


def _spec(name, glue_dir_name, label_names, tfds_text, tsv_text, tsv_label,
          metrics, *, regression=False, mnli_splits=False, label_strings=False):
  if mnli_splits:
    dev = ('validation_matched', 'validation_mismatched')
    test = ('test_matched', 'test_mismatched')
  else:
    dev, test = ('validation',), ('test',)
  return TaskSpec(
      name=name, glue_dir_name=glue_dir_name, tfds_name=f'glue/{name}',
      num_labels=1 if regression else len(label_names), is_regression=regression,
      label_names=tuple(label_names), dev_splits=dev, test_splits=test,
      tfds_text_fields=tuple(tfds_text), tsv_text_columns=tuple(tsv_text),
      tsv_label_column=tsv_label, metric_names=tuple(metrics),
      submission_uses_label_names=label_strings)


_NLI3 = ('entailment', 'neutral', 'contradiction')
_NLI2 = ('entailment', 'not_entailment')

TASKS: dict[str, TaskSpec] = {s.name: s for s in [
    _spec('cola', 'CoLA', ('unacceptable', 'acceptable'), ['sentence'],
          ['sentence'], 'label', ['mcc']),
    _spec('sst2', 'SST-2', ('negative', 'positive'), ['sentence'],
          ['sentence'], 'label', ['accuracy']),
    _spec('mrpc', 'MRPC', ('not_equivalent', 'equivalent'),
          ['sentence1', 'sentence2'], ['#1 String', '#2 String'], 'Quality',
          ['f1', 'accuracy']),
    _spec('stsb', 'STS-B', (), ['sentence1', 'sentence2'],
          ['sentence1', 'sentence2'], 'score', ['pearson', 'spearman'],
          regression=True),
    _spec('qqp', 'QQP', ('not_duplicate', 'duplicate'),
          ['question1', 'question2'], ['question1', 'question2'], 'is_duplicate',
          ['f1', 'accuracy']),
    _spec('mnli', 'MNLI', _NLI3, ['premise', 'hypothesis'],
          ['sentence1', 'sentence2'], 'gold_label', ['accuracy'],
          mnli_splits=True, label_strings=True),
    _spec('qnli', 'QNLI', _NLI2, ['question', 'sentence'],
          ['question', 'sentence'], 'label', ['accuracy'], label_strings=True),
    _spec('rte', 'RTE', _NLI2, ['sentence1', 'sentence2'],
          ['sentence1', 'sentence2'], 'label', ['accuracy'], label_strings=True),
    # WNLI's TSV labels are 0/1 with 1 = entailment, matching TFDS's order.
    _spec('wnli', 'WNLI', ('not_entailment', 'entailment'),
          ['sentence1', 'sentence2'], ['sentence1', 'sentence2'], 'label',
          ['accuracy']),
]}

# The diagnostic set: test-only, scored with an MNLI model. Kept out of TASKS so
# that task=all means the nine trainable tasks.
AX = dataclasses.replace(
    _spec('ax', 'diagnostic', _NLI3, ['premise', 'hypothesis'],
          ['sentence1', 'sentence2'], None, ['mcc'], label_strings=True),
    train_splits=(), dev_splits=())

_ALIASES = {'sst': 'sst2', 'sts': 'stsb', 'diagnostic': 'ax'}


def get_task(task: Union[str, TaskSpec]) -> TaskSpec:
  """Looks a task up by name, forgiving case and GLUE's spelling ('SST-2', 'STS-B').

  Args:
    task: a name or a TaskSpec.
  Returns:
    The TaskSpec.
  Raises:
    UserError: an unknown name.
  """
  if isinstance(task, TaskSpec):
    return task
  key = str(task).lower().replace('-', '').replace('_', '')
  key = _ALIASES.get(key, key)
  if key == 'ax':
    return AX
  if key not in TASKS:
    raise UserError(f'unknown GLUE task {task!r}; expected one of '
                    f'{", ".join(TASKS)} (or ax for the diagnostic set)')
  return TASKS[key]


def _check_split(spec: TaskSpec, split: str) -> None:
  if split not in spec.splits:
    raise UserError(f'GLUE task {spec.name} has no split {split!r}; '
                    f'use one of {", ".join(spec.splits)}')


@dataclasses.dataclass(frozen=True)
class Example:
  """One GLUE example; `guid` is the file's index/id column or the row position."""
  guid: int
  text_a: str
  text_b: Optional[str]
  label: Label


# ---------------------------------------------------------------------------
# glue_data directory


def split_filename(task: Union[str, TaskSpec], split: str) -> str:
  """The file name inside `<glue_dir>/<TASK>/` holding `split` (TFDS split names).

  Args:
    task: a name or TaskSpec.
    split: a TFDS split name.
  Returns:
    'train.tsv', 'dev_matched.tsv', ...
  """
  spec = get_task(task)
  _check_split(spec, split)
  if spec.name == 'ax':
    return 'diagnostic.tsv'
  base = {'train': 'train', 'validation': 'dev', 'test': 'test'}
  if split in base:
    return base[split] + '.tsv'
  kind, variant = split.split('_')  # validation_matched -> dev_matched.tsv
  return f'{base[kind]}_{variant}.tsv'


def _layout_hint(spec: TaskSpec) -> str:
  names = ', '.join(split_filename(spec, s) for s in spec.splits)
  return (f'expected the glue_data layout of download_glue_data.py: '
          f'<glue_dir>/{spec.glue_dir_name}/{{{names}}}')


def available_tasks(glue_dir: str) -> list[str]:
  """Names of the tasks (TASKS order) whose directory exists in `glue_dir`.

  Args:
    glue_dir: a glue_data folder.
  Returns:
    Task names.
  """
  if not _gfile().isdir(glue_dir):
    raise UserError(f'GLUE data directory {glue_dir} does not exist; set '
                    f'data.glue_dir to the folder holding CoLA/, SST-2/, ...')
  return [n for n, s in TASKS.items()
          if _gfile().isdir(os.path.join(glue_dir, s.glue_dir_name))]


def _read_lines(path: str) -> list[str]:
  """Lines of a UTF-8 file, BOM and CR stripped, split on '\\n' only."""
  with _gfile().GFile(path, 'rb') as f:
    data = f.read()
  try:
    text = data.decode('utf-8')
  except UnicodeDecodeError as e:
    line = data[:e.start].count(b'\n') + 1
    raise UserError(f'{path}:{line}: not valid UTF-8 ({e.reason}); re-download '
                    f'the file or convert it to UTF-8') from None
  if text.startswith('\ufeff'):
    text = text[1:]
  lines = text.split('\n')
  if lines and lines[-1] == '':
    lines.pop()
  return [l[:-1] if l.endswith('\r') else l for l in lines]


def _parse_label(spec: TaskSpec, raw: str, where: str) -> Label:
  raw = raw.strip()
  if spec.is_regression:
    try:
      value = float(raw)
    except ValueError:
      value = math.nan
    if not 0.0 <= value <= 5.0:  # also rejects nan
      raise UserError(f'{where}: STS-B score {raw!r} is not a number in [0, 5]; '
                      f'fix or remove this row')
    return value
  if raw in spec.label_names:
    return spec.label_names.index(raw)
  try:
    value = int(raw)
  except ValueError:
    value = -1
  if not 0 <= value < spec.num_labels:
    allowed = ', '.join(list(spec.label_names) +
                        [str(i) for i in range(spec.num_labels)])
    raise UserError(f'{where}: label {raw!r} is not one of {allowed}; '
                    f'fix or remove this row')
  return value


def read_glue_dir(glue_dir: str, task: Union[str, TaskSpec], split: str,
                  *, skip_malformed: bool = False) -> list[Example]:
  """Reads one split of a glue_data directory.

  Columns are found by header name; only CoLA train/dev have no header (fixed
  layout: source, label, original mark, sentence). A row with the wrong number
  of columns or a bad label raises UserError naming file and line, unless
  `skip_malformed` (for old QQP downloads, which have a few broken rows).

  Args:
    glue_dir: a glue_data folder.
    task: a name or TaskSpec.
    split: a TFDS split name.
    skip_malformed: skip bad rows instead of stopping.
  Returns:
    The Examples.
  """
  spec = get_task(task)
  path = os.path.join(glue_dir, spec.glue_dir_name, split_filename(spec, split))
  gfile = _gfile()
  if not gfile.exists(path) or gfile.isdir(path):
    what = ('task directory' if not gfile.isdir(os.path.dirname(path))
            else 'split file')
    raise UserError(f'GLUE {what} missing: {path} not found; {_layout_hint(spec)}')
  lines = _read_lines(path)
  if not any(lines):
    raise UserError(f'{path} is empty; re-download it ({_layout_hint(spec)})')
  labeled = split not in spec.test_splits
  wanted = list(spec.tsv_text_columns) + ([spec.tsv_label_column] if labeled else [])

  header = lines[0].split('\t')
  if all(c in header for c in wanted):
    ncols = len(header)
    text_idx = [header.index(c) for c in spec.tsv_text_columns]
    label_idx = header.index(spec.tsv_label_column) if labeled else None
    id_col = next((c for c in ('index', 'id') if c in header), None)
    id_idx = header.index(id_col) if id_col else None
    first = 1
  elif spec.name == 'cola' and labeled:
    ncols, text_idx, label_idx, id_idx, first = 4, [3], 1, None, 0
  else:
    missing = [c for c in wanted if c not in header]
    raise UserError(f'{path}:1: header lacks column(s) {", ".join(missing)} '
                    f'(found {lines[0][:200]!r}); {_layout_hint(spec)}')

  examples = []
  for lineno in range(first + 1, len(lines) + 1):
    line = lines[lineno - 1]
    if not line:
      continue  # a blank line carries no example
    where = f'{path}:{lineno}'
    cols = line.split('\t')
    try:
      if len(cols) != ncols:
        raise UserError(f'{where}: expected {ncols} tab-separated columns, found '
                        f'{len(cols)}; fix or remove this row')
      if id_idx is None:
        guid = len(examples)
      else:
        try:
          guid = int(cols[id_idx])
        except ValueError:
          raise UserError(f'{where}: index {cols[id_idx]!r} is not an integer; '
                          f'fix or remove this row') from None
      label = _parse_label(spec, cols[label_idx], where) if labeled else None
    except UserError as e:
      if skip_malformed:
        continue
      raise UserError(f'{e} (or pass skip_malformed=True to skip such rows)') from None
    texts = [cols[i] for i in text_idx]
    examples.append(Example(guid=guid, text_a=texts[0],
                            text_b=texts[1] if len(texts) > 1 else None,
                            label=label))
  return examples


# ---------------------------------------------------------------------------
# TFDS


def read_tfds(task: Union[str, TaskSpec], split: str,
              data_dir: Optional[str]) -> list[Example]:
  """Reads a prepared TFDS `glue/<task>` split without touching the network.

  `split` may use TFDS slicing ('train[:10%]').

  Args:
    task: a name or TaskSpec.
    split: a TFDS split.
    data_dir: where it is prepared (None: tfds' default).
  Returns:
    The Examples.
  """
  spec = get_task(task)
  _check_split(spec, split.split('[', 1)[0])
  import tensorflow_datasets as tfds  # slow import; only this path needs it

  try:
    ds = tfds.load(spec.tfds_name, split=split, data_dir=data_dir, download=False)
  except AssertionError:  # what TFDS raises for "not prepared"
    where = data_dir or os.environ.get('TFDS_DATA_DIR', '~/tensorflow_datasets')
    raise UserError(
        f'TFDS dataset {spec.tfds_name} is not prepared in {where}; on a '
        f'machine with network run `tfds build {spec.tfds_name} --data_dir=DIR` '
        f'and copy DIR here, or set data.glue_dir to a glue_data folder') from None
  examples = []
  for batch in ds.batch(4096).as_numpy_iterator():
    guids = batch['idx']
    texts = [batch[f] for f in spec.tfds_text_fields]
    labels = batch['label']
    for i in range(len(guids)):
      t = [x[i].decode('utf-8') for x in texts]
      raw = labels[i]
      if spec.is_regression:
        label = None if raw == -1 else float(raw)
      else:
        label = None if raw < 0 else int(raw)
      examples.append(Example(guid=int(guids[i]), text_a=t[0],
                              text_b=t[1] if len(t) > 1 else None, label=label))
  return examples


def load_examples(task: Union[str, TaskSpec], split: str, *,
                  glue_dir: Optional[str] = None,
                  tfds_data_dir: Optional[str] = None,
                  skip_malformed: bool = False) -> list[Example]:
  """Reads from `glue_dir` when given (it wins over TFDS), else from TFDS.

  Args:
    task: a task name or TaskSpec.
    split: 'train', a dev split ('validation', 'validation_matched', ...) or a test split.
    glue_dir: a glue_data folder (CoLA/, SST-2/, ...).
    tfds_data_dir: where tfds glue/<task> is prepared (None: tfds' default).
    skip_malformed: skip bad rows of glue_data TSVs instead of stopping (`read_glue_dir`).
  Returns:
    The split's Examples (label None on test splits).
  """
  if glue_dir:
    return read_glue_dir(glue_dir, task, split, skip_malformed=skip_malformed)
  return read_tfds(task, split, tfds_data_dir)


# ---------------------------------------------------------------------------
# Submissions

_SUBMISSION_NAMES = {'mnli': {'test_matched': 'MNLI-m.tsv',
                              'test_mismatched': 'MNLI-mm.tsv'},
                     'ax': {'test': 'AX.tsv'}}


def submission_filename(task: Union[str, TaskSpec], split: str = 'test') -> str:
  """The file name the GLUE server expects for a test split (e.g. 'MNLI-mm.tsv').

  Args:
    task: a name or TaskSpec.
    split: its test split.
  Returns:
    The file name.
  """
  spec = get_task(task)
  _check_split(spec, split)
  if split not in spec.test_splits:
    raise UserError(f'GLUE submissions are made on test splits, not {split!r}; '
                    f'use one of {", ".join(spec.test_splits)}')
  return _SUBMISSION_NAMES.get(spec.name, {}).get(split, spec.glue_dir_name + '.tsv')


def _format_prediction(spec: TaskSpec, p) -> str:
  if spec.is_regression:
    return f'{float(p):.6f}'
  i = int(p)
  if i != p or not 0 <= i < spec.num_labels:
    raise ValueError(f'{spec.name}: prediction {p!r} is not a class id in '
                     f'[0, {spec.num_labels})')
  return spec.label_names[i] if spec.submission_uses_label_names else str(i)


def write_submission(path: str, task: Union[str, TaskSpec],
                     predictions: Union[Mapping[int, Label], Sequence[Label]]) -> None:
  """Writes a GLUE submission TSV (`index\\tprediction`).

  `predictions` are class ids in TFDS order (floats for STS-B), either a mapping
  guid -> prediction (guids of the test examples) or a sequence in test order.

  Args:
    path: the TSV to write.
    task: a name or TaskSpec.
    predictions: as above.
  Returns:
    None.
  """
  spec = get_task(task)
  items = (sorted(predictions.items()) if isinstance(predictions, Mapping)
           else list(enumerate(predictions)))
  rows = [f'{int(i)}\t{_format_prediction(spec, p)}' for i, p in items]
  parent = os.path.dirname(path)
  if parent:
    _gfile().makedirs(parent)
  with _gfile().GFile(path, 'w') as f:  # UTF-8, '\n' line ends.
    f.write('index\tprediction\n')
    for row in rows:
      f.write(row + '\n')


def read_submission(path: str, task: Union[str, TaskSpec]) -> dict[int, Label]:
  """Reads a submission back into guid -> class id (float for STS-B).

  Args:
    path: a submission TSV.
    task: a name or TaskSpec.
  Returns:
    {guid: prediction}.
  """
  spec = get_task(task)
  out = {}
  lines = _read_lines(path)
  if not lines or lines[0].split('\t') != ['index', 'prediction']:
    raise UserError(f'{path}:1: expected header "index<TAB>prediction"; '
                    f'write it with write_submission')
  for lineno, line in enumerate(lines[1:], start=2):
    cols = line.split('\t')
    try:
      if len(cols) != 2:
        raise ValueError(f'expected 2 tab-separated columns, found {len(cols)}')
      guid = int(cols[0])
      out[guid] = (float(cols[1]) if spec.is_regression
                   else _parse_label(spec, cols[1], f'{path}:{lineno}'))
    except ValueError as e:
      raise UserError(f'{path}:{lineno}: bad submission row ({e}); '
                      f'rewrite the file with write_submission') from None
  return out
