"""Faults a new user meets (issue 35): paths that cannot be written, an export over a
folder, --help, presets and hints, and nothing on stderr but the one error line."""

import ast
import errno
import os
import pathlib
import re
import subprocess
import sys

import pytest

from sharedbert.convert import hf as convert_hf
from sharedbert.config import validation
from sharedbert.errors import UserError

REPO = pathlib.Path(__file__).resolve().parents[1]
FIXTURE = REPO / 'tests' / 'fixtures' / 'hf_bert_tiny'
ENV = dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=str(REPO))
ENV.pop('TF_CPP_MIN_LOG_LEVEL', None)  # The package's own default must keep stderr clean.
COMMANDS = ('main', 'study', 'probe', 'params', 'convert_hf', 'convert_shared', 'bench')


def command(name, *args):
  """`python -m` of a command's module: main, or a `sharedbert` subcommand's."""
  from sharedbert import cli
  module = 'sharedbert.main' if name == 'main' else cli.SUBCOMMANDS[name][0]
  return subprocess.run([sys.executable, '-m', module, *args], cwd=REPO,
                        env=ENV, capture_output=True, text=True, timeout=300)


def one_line(result, program, message_start):
  assert result.returncode == 2, result.stderr[-2000:]
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith(f'{program}: error: {message_start}'), \
      result.stderr[-2000:]


@pytest.mark.parametrize('module', COMMANDS)
def test_help_exits_0(module):
  result = command(module, '--help')
  assert result.returncode == 0, result.stderr[-2000:]
  assert 'flags' in result.stdout.lower() or 'usage' in result.stdout.lower()


# ---------------------------------------------------------------------------------------
# Paths that cannot be written: one line, exit 2, before any work.

def test_an_empty_workdir_is_one_line():
  one_line(command('main', '--config=configs/shared_base.py:tiny', '--workdir='),
           'sharedbert', '--workdir is empty')


def test_a_workdir_under_a_file_is_one_line(tmp_path):
  (tmp_path / 'file').write_text('x')
  one_line(command('probe', f'--workdir={tmp_path}/file/w'), 'sharedbert probe',
           f'--workdir {tmp_path}/file/w is under {tmp_path}/file, which is not a directory')


def test_an_unwritable_directory_is_refused_before_anything_is_made(tmp_path, monkeypatch):
  """Root ignores permission bits, so the write is refused as a read-only filesystem
  refuses it: the check creates and removes a temporary file, and says why it failed."""
  def read_only(**kwargs):
    raise OSError(errno.EROFS, os.strerror(errno.EROFS))
  monkeypatch.setattr(validation.tempfile, 'TemporaryFile', read_only)
  with pytest.raises(UserError, match=f'^--workdir {tmp_path}/a/b cannot be written \\(it '
                     f'would be created in {tmp_path}\\): Read-only file system; '):
    validation.workdir(str(tmp_path / 'a' / 'b'))
  with pytest.raises(UserError, match=f'^--out_json {tmp_path}/r.json cannot be written: its '
                     f'folder {tmp_path} cannot be written: Read-only file system'):
    validation.output_file(str(tmp_path / 'r.json'), '--out_json')
  monkeypatch.undo()
  assert list(tmp_path.iterdir()) == []
  validation.workdir(str(tmp_path / 'a'))  # Writable: accepted, and nothing is left.
  assert list(tmp_path.iterdir()) == []


def test_a_read_only_filesystem_as_a_command(tmp_path):
  disk = tmp_path / 'ro'
  disk.mkdir()
  if os.geteuid() != 0 or subprocess.run(
      ['mount', '-t', 'tmpfs', '-o', 'size=1m,ro', 'tmpfs', str(disk)],
      capture_output=True).returncode:
    pytest.skip('cannot mount a tmpfs here (needs root); the test above covers the check')
  try:
    one_line(command('main', '--config=configs/shared_base.py:tiny', f'--workdir={disk}/w'),
             'sharedbert', f'--workdir {disk}/w cannot be written (it would be created in '
             f'{disk}): Read-only file system')
    one_line(command('convert_shared', f'--source={tmp_path}', f'--target={disk}/t',
                     '--attention=shared'), 'sharedbert convert_shared',
             f'--target {disk}/t cannot be written')
  finally:
    subprocess.run(['umount', str(disk)], capture_output=True)


# ---------------------------------------------------------------------------------------
# export over a folder.

@pytest.fixture(scope='module')
def imported(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('imported') / 'w'
  convert_hf.import_hf(str(FIXTURE), str(workdir))
  return workdir


def test_export_refuses_a_non_empty_folder_and_leaves_it_untouched(imported, tmp_path):
  out = tmp_path / 'hf'
  out.mkdir()
  (out / 'config.json').write_text('{"mine": 1}')
  (out / 'notes.txt').write_text('keep me')
  result = command('convert_hf', 'export', f'--workdir={imported}', f'--hf_dir={out}')
  one_line(result, 'sharedbert convert_hf', f'--hf_dir={out} exists and is not empty; choose '
           'a new directory, or pass --overwrite')
  assert sorted(p.name for p in out.iterdir()) == ['config.json', 'notes.txt']
  assert (out / 'config.json').read_text() == '{"mine": 1}'
  assert sorted(p.name for p in tmp_path.iterdir()) == ['hf']  # No temporary left beside it.


def test_export_with_overwrite_replaces_the_folder_whole(imported, tmp_path):
  out = tmp_path / 'hf'
  out.mkdir()
  (out / 'notes.txt').write_text('stale')
  convert_hf.export_hf(str(imported), str(out), overwrite=True)
  names = sorted(p.name for p in out.iterdir())
  assert 'notes.txt' not in names and {'config.json', 'model.safetensors'} <= set(names)
  assert sorted(p.name for p in tmp_path.iterdir()) == ['hf']
  # An empty folder needs no --overwrite.
  empty = tmp_path / 'empty'
  empty.mkdir()
  convert_hf.export_hf(str(imported), str(empty))
  assert (empty / 'model.safetensors').exists()


# ---------------------------------------------------------------------------------------
# Presets and values: one line, and nothing else on stderr.

def test_an_unknown_probe_preset_is_one_line(tmp_path):
  one_line(command('probe', '--config=configs/probe.py:nope', f'--workdir={tmp_path}/p'),
           'sharedbert probe', "unknown probe preset 'nope'; choose cpu, smoke, mirror, gpu")


def test_a_bad_probe_value_is_one_line(tmp_path):
  one_line(command('probe', f'--workdir={tmp_path}/p', '--config.seeds=0'),
           'sharedbert probe', 'config.seeds=0 is out of range')


def test_an_unknown_study_preset_is_one_line(tmp_path):
  one_line(command('study', '--config=configs/study.py:nope', f'--workdir={tmp_path}/s'),
           'sharedbert study', "unknown study preset 'nope'")


def test_the_study_names_its_own_corpus_key(tmp_path):
  data = tmp_path / 'data'
  (data / 'glue').mkdir(parents=True)
  result = command('study', f'--config=configs/study.py:cpu,data={data}',
                   f'--workdir={tmp_path}/s')
  one_line(result, 'sharedbert study', f'corpus path {data}/corpus does not exist; set '
           'corpus= after the preset (e.g. configs/study.py:cpu,corpus=PATH)')
  assert 'config.data.corpus' not in result.stderr


# ---------------------------------------------------------------------------------------
# Every hint that names a config key names one that exists.

def _hint_keys() -> set[str]:
  """config.a.b paths in the string literals of the package (f-strings' text included)."""
  keys = set()
  for path in (REPO / 'sharedbert').rglob('*.py'):
    if 'remote_code' in path.parts:  # PyTorch code: its `config` is transformers'.
      continue
    for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
      if isinstance(node, ast.Constant) and isinstance(node.value, str):
        for match in re.finditer(r'(?<![\w.])config\.([a-z_]+(?:\.[a-z_]+)*)', node.value):
          keys.add(match.group(1).rstrip('.'))
  # File names (config.json, config.py) and the docstrings' placeholder (config.a.b).
  return {k for k in keys if k.split('.')[0] not in ('json', 'py') and k != 'a.b'}


def _configs():
  from sharedbert import config as sb_config
  from sharedbert.models import params as params_lib
  out = [sb_config.pretrain_config('shared', 'tiny')]
  for name in ('glue', 'study', 'probe', 'uptrain'):
    out.append(params_lib.load_config_file(str(REPO / 'configs' / f'{name}.py'), None))
  return out


def _accepted(key: str, configs) -> bool:
  for config in configs:
    node = config
    for part in key.split('.'):
      if hasattr(node, 'keys') and part in node.keys():
        node = node[part]
      else:
        break
    else:
      return True
  return False


def test_every_hint_names_a_key_that_exists():
  keys = _hint_keys()
  assert 'data.corpus' in keys and len(keys) > 10  # The scan finds the hints.
  configs = _configs()
  missing = sorted(k for k in keys if not _accepted(k, configs))
  assert not missing, missing


# ---------------------------------------------------------------------------------------
# The `sharedbert` console script and the study's data folder.

def sharedbert_cli(*args):
  return subprocess.run([sys.executable, '-c', 'from sharedbert.cli import command; command()',
                         *args], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)


def test_sharedbert_help_lists_every_subcommand():
  from sharedbert import cli
  result = sharedbert_cli('--help')
  assert result.returncode == 0, result.stderr
  for name in cli.SUBCOMMANDS:
    assert f'\n  {name} ' in result.stdout, name
  one_line(sharedbert_cli('parms'), 'sharedbert', "unknown subcommand 'parms'; did you mean "
           'params?')


def test_a_subcommand_runs_its_module():
  result = sharedbert_cli('params', '--config=configs/single_base.py:tiny')
  assert result.returncode == 0, result.stderr[-2000:]
  assert "attention counts agree with the variant's closed form" in result.stdout
  # Flags alone are the main command, as before subcommands existed.
  one_line(sharedbert_cli('--config=configs/shared_base.py:tiny', '--workdir='), 'sharedbert',
           '--workdir is empty')


def test_the_study_without_its_data_folder_is_one_line(tmp_path):
  one_line(command('study', '--config=configs/study.py:cpu', f'--workdir={tmp_path}/s'),
           'sharedbert study', 'the cpu study has no data: give it the folder holding corpus/ '
           'and glue/, --config=configs/study.py:cpu,data=DIR')


def test_path_flags_are_resolved_once_at_the_entry(tmp_path):
  """Relative paths and ~ work for every path flag (issue 44, item 4): the command sees
  absolute paths (a relative GLUE --workdir crashed orbax after training; --workdir=~/x
  made ./~/x)."""
  from sharedbert import cli
  assert cli.user_path('~/x') == os.path.join(os.path.expanduser('~'), 'x')
  assert cli.user_path('rel/dir') == os.path.join(os.getcwd(), 'rel', 'dir')
  for kept in ('gs://bucket/run', 'tfds:wikipedia/20230601.en', 'demo', ''):
    assert cli.user_path(kept) == kept
  (tmp_path / 'sub').mkdir()
  result = subprocess.run(
      [sys.executable, '-m', 'sharedbert.convert.hf', 'export', '--workdir=sub/nowhere',
       '--hf_dir=~/never_written'], cwd=tmp_path, env=ENV, capture_output=True, text=True,
      timeout=300)
  assert result.returncode == 2
  assert f'{tmp_path}/sub/nowhere has no checkpoints/ directory' in result.stderr
  assert not (tmp_path / '~').exists()


def test_an_export_removes_what_an_interrupted_export_left_and_keeps_a_live_ones(
    imported, tmp_path):
  """Issue 44, item 9: a SIGTERM during export left a hidden .out.tmp-* folder that later
  exports never removed. Work folders carry their process id; the next export into the
  same parent removes those whose process is gone."""
  dead = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                        capture_output=True, text=True).stdout.strip()
  stale = tmp_path / f'.out.tmp-{dead}-abc'
  stale.mkdir()
  (stale / 'model.safetensors').write_text('half written')
  live = tmp_path / f'.other.tmp-{os.getpid()}-xyz'
  live.mkdir()
  convert_hf.export_hf(str(imported), str(tmp_path / 'out2'))
  assert not stale.exists() and live.exists()
  assert sorted(n for n in os.listdir(tmp_path) if n.startswith('.')) == [live.name]


def test_a_config_of_the_wrong_kind_is_one_line_and_writes_nothing(tmp_path):
  """Issue 44, item 5: these gave tracebacks (rc 1). The rule for every command, then one
  of the four cases of the issue as a real command."""
  from sharedbert import cli
  for module, mode in (('sharedbert.models.params', 'finetune'), ('sharedbert.lab.probe', 'pretrain'),
                       ('sharedbert.lab.study', 'finetune'),
                       ('sharedbert.convert.hf', 'finetune')):
    assert cli.config_kind_error(module, mode).startswith(f'--config is a {mode} config; '
                                                          'this command takes')
  assert cli.config_kind_error('sharedbert.main', 'finetune') is None
  assert cli.config_kind_error('sharedbert.lab.probe', 'probe') is None
  workdir = tmp_path / 'w'
  result = command('study', '--config=configs/glue.py:sst2', f'--workdir={workdir}')
  one_line(result, 'sharedbert study', '--config is a finetune config; this command takes '
           'a study config (configs/study.py)')
  assert not workdir.exists()


def test_bench_refuses_an_undecodable_out_md_before_any_work(tmp_path):
  """Issue 44, item 5: a non-UTF-8 --out_md ran the whole benchmark, then crashed."""
  bad = tmp_path / 'bad.md'
  bad.write_bytes(b'\xff\xfe\x00 not text')
  result = command('bench', f'--out_md={bad}', f'--out_json={tmp_path}/b.json')
  one_line(result, 'sharedbert bench', f'--out_md={bad} is not UTF-8 text')
  assert not (tmp_path / 'b.json').exists() and bad.read_bytes() == b'\xff\xfe\x00 not text'


def test_an_encoder_that_is_no_bert_is_refused_before_anything_is_created(tmp_path):
  """Issue 44, item 5: `uptrain --encoder=<a GPT-2 folder>` refused in one line but had
  already created W/conversion/. Now uptrain and conversion check the folder first."""
  from sharedbert.lab import conversion
  from sharedbert.lab import uptrain
  from sharedbert.models.params import load_config_file
  encoder = tmp_path / 'gpt2'
  encoder.mkdir()
  (encoder / 'config.json').write_text('{"model_type": "gpt2", "n_embd": 64, "n_layer": 2}')
  (tmp_path / 'data' / 'corpus').mkdir(parents=True)
  (tmp_path / 'data' / 'glue' / 'STS-B').mkdir(parents=True)
  workdir = tmp_path / 'w'
  config = load_config_file(str(REPO / 'configs' / 'uptrain.py'), None)
  with pytest.raises(UserError):
    uptrain.run(config, str(encoder), str(tmp_path / 'data'), str(workdir))
  with pytest.raises(UserError):
    conversion.run(str(encoder), str(tmp_path / 'data'), str(workdir))
  assert not workdir.exists()


def test_resuming_on_another_corpus_is_refused_unless_restart(tmp_path, monkeypatch):
  """Issue 44, item 8: a resume with another corpus kept the old vocabulary and switched
  the held-out set mid-curve. The data is part of the run's identity, like the model."""
  import jax.numpy as jnp
  import ml_collections
  from sharedbert import checkpoint as checkpoint_lib
  from sharedbert import config as sb_config
  from sharedbert import train
  from sharedbert.models.bert import ModelConfig
  (tmp_path / 'a').mkdir()
  (tmp_path / 'b').mkdir()
  config = sb_config.pretrain_config('shared', 'tiny')
  config.data.corpus = str(tmp_path / 'a')
  workdir = tmp_path / 'run'
  ckpt = checkpoint_lib.Checkpointer(str(workdir), ml_collections.ConfigDict(
      dict(every_steps=1, max_to_keep=1, async_save=False)))
  ckpt.save(1, {'w': jnp.zeros(3)}, {'model': ModelConfig.from_config(config.model).to_dict(),
                                     'data': train.data_identity(config)})
  ckpt.wait()
  ckpt.close()
  assert train.check_workdir(config, str(workdir)) is False  # The same data resumes.
  monkeypatch.chdir(tmp_path)
  config.data.corpus = 'a'  # The same folder typed relative: still the same data.
  assert train.check_workdir(config, str(workdir)) is False
  config.data.corpus = str(tmp_path / 'b')
  with pytest.raises(UserError, match='was trained on other data .*corpus'):
    train.check_workdir(config, str(workdir))
  config.restart = True
  assert train.check_workdir(config, str(workdir)) is True


def test_export_onto_a_full_disk_is_one_line_exit_4_and_leaves_nothing(imported, tmp_path):
  """Issue 44, item 6: an export onto a full disk ended in a SafetensorError traceback."""
  from test_write_failures import _mount_tmpfs
  disk = tmp_path / 'disk'
  if not _mount_tmpfs(disk, '64k'):
    pytest.skip('cannot mount a tmpfs here (needs root); CI runs as root')
  try:
    result = command('convert_hf', 'export', f'--workdir={imported}', f'--hf_dir={disk}/out')
    assert result.returncode == 4, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        'sharedbert convert_hf: error: could not write: No space left on device'), lines
    assert os.listdir(disk) == []  # Neither the export nor its temporary folder.
  finally:
    subprocess.run(['umount', str(disk)], capture_output=True)
