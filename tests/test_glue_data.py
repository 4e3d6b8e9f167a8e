"""GLUE readers on small fixture files that reproduce each quirk of the real TSVs."""


import numpy as np
import pytest

from sharedbert.data import glue
from sharedbert.errors import UserError


def _write(root, task_dir, name, text, *, bom=False, crlf=False):
  path = root / task_dir / name
  path.parent.mkdir(parents=True, exist_ok=True)
  if crlf:
    text = text.replace('\n', '\r\n')
  path.write_bytes((b'\xef\xbb\xbf' if bom else b'') + text.encode('utf-8'))
  return path


MRPC_HEADER = 'Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n'


@pytest.fixture
def glue_dir(tmp_path):
  """A miniature glue_data folder with the real files' layouts and quirks."""
  # CoLA: no header in train/dev (dev also lacks the final newline); test has one.
  _write(tmp_path, 'CoLA', 'train.tsv',
         'gj04\t1\t\tOur friends won\'t buy this analysis.\n'
         'gj04\t0\t*\tThe more you would want, the less you would eat.\n'
         'l-93\t1\t\tSusan whispered "Shut up".\n')
  _write(tmp_path, 'CoLA', 'dev.tsv', 'gj04\t1\t\tThe sailors rode the breeze.')
  _write(tmp_path, 'CoLA', 'test.tsv',
         'index\tsentence\n0\tBill whistled past the house.\n1\tThe car honked.\n')
  # SST-2: trailing spaces inside the sentence are kept; CRLF line endings.
  _write(tmp_path, 'SST-2', 'train.tsv',
         'sentence\tlabel\nhide new secretions \t0\na charming journey . \t1\n',
         crlf=True)
  # MRPC: BOM before the header, quotes that CSV parsing would swallow.
  _write(tmp_path, 'MRPC', 'train.tsv', MRPC_HEADER +
         '1\t702876\t702977\tAmrozi called him " the witness " .\t'
         '" The witness , Amrozi said .\n'
         '0\t2108705\t2108831\tHe said " no .\tShe said "yes" .\n', bom=True)
  _write(tmp_path, 'MRPC', 'test.tsv',
         'index\t#1 ID\t#2 ID\t#1 String\t#2 String\n'
         '0\t1089874\t1089925\tPCCW \'s chief .\tCurrent chief .\n')
  # STS-B: float scores, many leading columns.
  sts_header = ('index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\t'
                'sentence1\tsentence2')
  _write(tmp_path, 'STS-B', 'dev.tsv', sts_header + '\tscore\n'
         '0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA man.\tA guy.\t5.000\n'
         '1\tmain-captions\tMSRvid\t2012test\t0002\tnone\tnone\tA cat.\tA dog.\t0.250\n')
  _write(tmp_path, 'STS-B', 'test.tsv', sts_header + '\n'
         '0\tmain-captions\tMSRvid\t2012test\t0024\tnone\tnone\tA girl.\tA lady.\n')
  # MNLI: sentence1/2 at columns 8/9, gold_label last; labels are strings.
  mnli_cols = ['index', 'promptID', 'pairID', 'genre', 'sentence1_binary_parse',
               'sentence2_binary_parse', 'sentence1_parse', 'sentence2_parse',
               'sentence1', 'sentence2']
  def mnli_row(i, s1, s2, labels):
    return '\t'.join([str(i), '31193', f'{i}n', 'fiction', '( x )', '( y )',
                      '(ROOT x)', '(ROOT y)', s1, s2] + labels) + '\n'
  dev_header = '\t'.join(mnli_cols + [f'label{i}' for i in range(1, 6)] +
                         ['gold_label']) + '\n'
  five = ['neutral'] * 5
  _write(tmp_path, 'MNLI', 'dev_matched.tsv', dev_header +
         mnli_row(0, 'The new rights are nice.', 'Everyone likes it.',
                  five + ['neutral']) +
         mnli_row(1, 'This site includes a list.', 'It has a list.',
                  five + ['entailment']))
  _write(tmp_path, 'MNLI', 'dev_mismatched.tsv', dev_header +
         mnli_row(0, 'Your gift is welcome.', 'Gifts are refused.',
                  five + ['contradiction']))
  _write(tmp_path, 'MNLI', 'test_matched.tsv', '\t'.join(mnli_cols) + '\n' +
         mnli_row(0, 'Hello.', 'Hi.', []))
  # RTE: string labels in TFDS order (entailment=0).
  _write(tmp_path, 'RTE', 'train.tsv', 'index\tsentence1\tsentence2\tlabel\n'
         '0\tNo weapons found.\tWeapons found.\tnot_entailment\n'
         '1\tA place.\tA place.\tentailment\n')
  _write(tmp_path, 'QQP', 'test.tsv',
         'id\tquestion1\tquestion2\n7\tWhy?\tHow?\n8\tWhat "is\tit?\n')
  return tmp_path


def test_cola_without_header_and_test_with_header(glue_dir):
  train = glue.read_glue_dir(glue_dir, 'cola', 'train')
  assert [e.label for e in train] == [1, 0, 1]
  assert train[2] == glue.Example(2, 'Susan whispered "Shut up".', None, 1)
  dev = glue.read_glue_dir(glue_dir, 'cola', 'validation')  # no final newline
  assert len(dev) == 1 and dev[0].text_a == 'The sailors rode the breeze.'
  test = glue.read_glue_dir(glue_dir, 'cola', 'test')
  assert [(e.guid, e.label) for e in test] == [(0, None), (1, None)]
  assert test[1].text_a == 'The car honked.'


def test_crlf_line_endings(glue_dir):
  train = glue.read_glue_dir(glue_dir, 'SST-2', 'train')
  assert [(e.text_a, e.label) for e in train] == [
      ('hide new secretions ', 0), ('a charming journey . ', 1)]


def test_mrpc_bom_and_quotes(glue_dir):
  train = glue.read_glue_dir(glue_dir, 'mrpc', 'train')
  assert [e.label for e in train] == [1, 0]
  assert train[0].text_b == '" The witness , Amrozi said .'
  assert train[1].text_a == 'He said " no .'  # unbalanced quote kept verbatim
  assert train[1].text_b == 'She said "yes" .'
  test = glue.read_glue_dir(glue_dir, 'mrpc', 'test')
  assert test == [glue.Example(0, "PCCW 's chief .", 'Current chief .', None)]


def test_stsb_float_labels_and_unlabeled_test(glue_dir):
  dev = glue.read_glue_dir(glue_dir, 'stsb', 'validation')
  assert [e.label for e in dev] == [5.0, 0.25]
  assert all(isinstance(e.label, float) for e in dev)
  assert (dev[1].text_a, dev[1].text_b) == ('A cat.', 'A dog.')
  test = glue.read_glue_dir(glue_dir, 'stsb', 'test')
  assert test == [glue.Example(0, 'A girl.', 'A lady.', None)]


def test_mnli_matched_and_mismatched(glue_dir):
  m = glue.read_glue_dir(glue_dir, 'mnli', 'validation_matched')
  assert [e.label for e in m] == [1, 0]  # neutral, entailment in TFDS order
  assert (m[1].text_a, m[1].text_b) == ('This site includes a list.', 'It has a list.')
  mm = glue.read_glue_dir(glue_dir, 'mnli', 'validation_mismatched')
  assert [e.label for e in mm] == [2]
  test = glue.read_glue_dir(glue_dir, 'mnli', 'test_matched')
  assert test == [glue.Example(0, 'Hello.', 'Hi.', None)]


def test_string_labels_and_id_column(glue_dir):
  assert [e.label for e in glue.read_glue_dir(glue_dir, 'rte', 'train')] == [1, 0]
  test = glue.read_glue_dir(glue_dir, 'qqp', 'test')
  assert [(e.guid, e.text_a, e.text_b) for e in test] == [
      (7, 'Why?', 'How?'), (8, 'What "is', 'it?')]


@pytest.mark.parametrize('row,problem', [
    ('1\t1\t2\tonly four columns\n', 'columns'),
    ('1\t1\t2\ta\tb\textra\n', 'columns'),
    ('yes\t1\t2\ta\tb\n', "label 'yes'"),
    ('2\t1\t2\ta\tb\n', "label '2'"),
])
def test_malformed_row_names_file_and_line(tmp_path, row, problem):
  path = _write(tmp_path, 'MRPC', 'dev.tsv',
                MRPC_HEADER + '1\t1\t2\tfine\tfine\n' + row, bom=True)
  with pytest.raises(UserError, match=problem) as e:
    glue.read_glue_dir(tmp_path, 'mrpc', 'validation')
  assert f'{path}:3:' in str(e.value)
  assert '\n' not in str(e.value)
  skipped = glue.read_glue_dir(tmp_path, 'mrpc', 'validation', skip_malformed=True)
  assert len(skipped) == 1


@pytest.mark.parametrize('score', ['5.5', 'n/a', 'nan', ''])
def test_bad_stsb_score(tmp_path, score):
  path = _write(tmp_path, 'STS-B', 'train.tsv', 'index\tsentence1\tsentence2\tscore\n'
                f'0\ta\tb\t1.0\n1\ta\tb\t{score}\n')
  with pytest.raises(UserError, match=f'{path}:3: STS-B score'):
    glue.read_glue_dir(tmp_path, 'stsb', 'train')


def test_missing_split_task_and_header(glue_dir):
  with pytest.raises(UserError, match="has no split 'test_matched'"):
    glue.read_glue_dir(glue_dir, 'cola', 'test_matched')
  with pytest.raises(UserError, match=r'split file missing: .*SST-2.dev\.tsv'):
    glue.read_glue_dir(glue_dir, 'sst2', 'validation')
  with pytest.raises(UserError, match=r'task directory missing: .*QNLI.train\.tsv.*'
                     r'QNLI/\{train\.tsv, dev\.tsv, test\.tsv\}'):
    glue.read_glue_dir(glue_dir, 'qnli', 'train')
  with pytest.raises(UserError, match='unknown GLUE task'):
    glue.read_glue_dir(glue_dir, 'squad', 'train')
  _write(glue_dir, 'WNLI', 'train.tsv', 'idx\ts1\ts2\tlabel\n0\ta\tb\t1\n')
  with pytest.raises(UserError, match=r'train\.tsv:1: header lacks column\(s\) '
                     r'sentence1, sentence2'):
    glue.read_glue_dir(glue_dir, 'wnli', 'train')


def test_available_tasks_and_load_examples(glue_dir, tmp_path):
  assert glue.available_tasks(glue_dir) == ['cola', 'sst2', 'mrpc', 'stsb', 'qqp',
                                            'mnli', 'rte']
  with pytest.raises(UserError, match='does not exist'):
    glue.available_tasks(tmp_path / 'nope')
  got = glue.load_examples('cola', 'train', glue_dir=str(glue_dir),
                           tfds_data_dir='/ignored')
  assert got == glue.read_glue_dir(glue_dir, 'cola', 'train')


def test_glue_dir_on_another_filesystem(glue_dir):
  # tf.io.gfile's in-memory filesystem stands in for gs://: the readers, the task listing and
  # the submission writer must not go through the local-only open() / os.path.
  import tensorflow as tf
  gfile, root = tf.io.gfile, 'ram://sharedbert_test_glue'
  for path in sorted(glue_dir.rglob('*.tsv')):
    target = f'{root}/{path.relative_to(glue_dir).as_posix()}'
    gfile.makedirs(target.rsplit('/', 1)[0])
    gfile.copy(str(path), target, overwrite=True)
  assert glue.available_tasks(root) == glue.available_tasks(glue_dir)
  for task, split in (('cola', 'train'), ('sst2', 'train'), ('mrpc', 'train'),
                      ('stsb', 'validation'), ('mnli', 'validation_matched')):
    assert glue.read_glue_dir(root, task, split) == glue.read_glue_dir(glue_dir, task, split)
  with pytest.raises(UserError, match='split file missing'):
    glue.read_glue_dir(root, 'sst2', 'validation')
  out = f'{root}/submission/RTE.tsv'
  glue.write_submission(out, 'rte', [0, 1])
  assert glue.read_submission(out, 'rte') == {0: 0, 1: 1}


def test_registry():
  assert list(glue.TASKS) == ['cola', 'sst2', 'mrpc', 'stsb', 'qqp', 'mnli', 'qnli',
                              'rte', 'wnli']
  mnli = glue.TASKS['mnli']
  assert mnli.label_names == ('entailment', 'neutral', 'contradiction')
  assert mnli.dev_splits == ('validation_matched', 'validation_mismatched')
  assert glue.TASKS['stsb'].num_labels == 1 and glue.TASKS['stsb'].is_regression
  assert glue.get_task('STS-B') is glue.TASKS['stsb']
  assert glue.get_task('SST-2').tfds_name == 'glue/sst2'
  assert glue.TASKS['rte'].label_names[0] == 'entailment'
  assert glue.TASKS['wnli'].label_names[1] == 'entailment'


@pytest.mark.parametrize('task,split,name', [
    ('cola', 'test', 'CoLA.tsv'), ('sst2', 'test', 'SST-2.tsv'),
    ('mrpc', 'test', 'MRPC.tsv'), ('stsb', 'test', 'STS-B.tsv'),
    ('qqp', 'test', 'QQP.tsv'), ('mnli', 'test_matched', 'MNLI-m.tsv'),
    ('mnli', 'test_mismatched', 'MNLI-mm.tsv'), ('qnli', 'test', 'QNLI.tsv'),
    ('rte', 'test', 'RTE.tsv'), ('wnli', 'test', 'WNLI.tsv'), ('ax', 'test', 'AX.tsv'),
])
def test_submission_filenames(task, split, name):
  assert glue.submission_filename(task, split) == name


def test_submission_round_trip(tmp_path):
  cases = {
      'rte': ([0, 1, 1], ['entailment', 'not_entailment', 'not_entailment']),
      'mnli': (np.array([2, 0, 1]), ['contradiction', 'entailment', 'neutral']),
      'ax': ([1], ['neutral']),
      'cola': ([1, 0], ['1', '0']),
      'wnli': ([1, 0], ['1', '0']),
      'stsb': ([4.25, 0.0, np.float32(3.5)], ['4.250000', '0.000000', '3.500000']),
  }
  for task, (preds, column) in cases.items():
    path = tmp_path / 'out' / glue.submission_filename(task, glue.get_task(task).test_splits[0])
    glue.write_submission(str(path), task, preds)
    lines = path.read_text(encoding='utf-8').split('\n')
    assert lines[0] == 'index\tprediction' and lines[-1] == ''
    assert lines[1:-1] == [f'{i}\t{c}' for i, c in enumerate(column)]
    assert glue.read_submission(str(path), task) == dict(enumerate(
        float(p) if task == 'stsb' else int(p) for p in preds))
  path = tmp_path / 'QQP.tsv'
  glue.write_submission(str(path), 'qqp', {8: 1, 7: 0})  # guid -> class, any order
  assert path.read_text().split('\n')[1:3] == ['7\t0', '8\t1']
  with pytest.raises(ValueError):
    glue.write_submission(str(path), 'rte', [2])
  with pytest.raises(UserError, match='test splits'):
    glue.submission_filename('rte', 'validation')


# --- TFDS ------------------------------------------------------------------


def test_tfds_mock_offline():
  tfds = pytest.importorskip('tensorflow_datasets')
  with tfds.testing.mock_data(num_examples=8):
    pair = glue.read_tfds('mrpc', 'train', None)
    single = glue.read_tfds('cola', 'validation', None)
    sts = glue.read_tfds('stsb', 'train', None)
    mnli = glue.read_tfds('mnli', 'validation_mismatched', None)
  assert len(pair) == 8
  for e in pair + mnli:
    assert isinstance(e.guid, int) and isinstance(e.text_a, str)
    assert isinstance(e.text_b, str) and isinstance(e.label, int)
  assert all(e.text_b is None and e.label in (0, 1) for e in single)
  assert all(isinstance(e.label, float) for e in sts)
  assert all(e.label in (0, 1, 2) for e in mnli)


def test_tfds_test_labels_become_none(monkeypatch):
  tfds = pytest.importorskip('tensorflow_datasets')
  import tensorflow as tf  # pylint: disable=import-outside-toplevel

  def fake_load(name, split, data_dir, download):
    assert (name, split, download) == ('glue/stsb', 'test', False)
    return tf.data.Dataset.from_tensor_slices({
        'sentence1': [b'caf\xc3\xa9', b'b'], 'sentence2': [b'c', b'd'],
        'label': np.array([-1.0, -1.0], np.float32), 'idx': np.array([0, 1], np.int32)})

  monkeypatch.setattr(tfds, 'load', fake_load)
  assert glue.read_tfds('stsb', 'test', None) == [
      glue.Example(0, 'café', 'c', None), glue.Example(1, 'b', 'd', None)]


def test_tfds_not_prepared(tmp_path):
  pytest.importorskip('tensorflow_datasets')
  with pytest.raises(UserError, match=r'not prepared .*tfds build glue/rte '
                     r'--data_dir=DIR.*data\.glue_dir') as e:
    glue.read_tfds('rte', 'train', str(tmp_path))
  assert str(tmp_path) in str(e.value)
  with pytest.raises(UserError, match='no split'):
    glue.read_tfds('rte', 'validation_matched', str(tmp_path))
