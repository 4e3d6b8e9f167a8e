"""Bad input: one clear line, a non-zero exit, no traceback unless --verbose, and the
workdir left exactly as it was (or not created).

Flag and config mistakes go through the real command line (they fail while absl parses
the flags, before main() runs, so each process takes a second). The checks that need
the training module run in this process against `train.train_and_evaluate`, the function
the command calls, and one of them again through the command line for its exit code.
"""

import json
import os
import pathlib
import subprocess
import sys

import jax
import ml_collections
import numpy as np
import pytest

from sharedbert import checkpoint as checkpoint_lib
from sharedbert import config as sb_config
from sharedbert.utils import metric_writer
from sharedbert import pretrain_step
from sharedbert import train
from sharedbert import errors
from sharedbert.utils import workdir_lock
from sharedbert.data import glue
from sharedbert.errors import UserError
from sharedbert.lab import study_plan
from sharedbert.models.bert import ModelConfig

REPO = pathlib.Path(__file__).resolve().parents[1]
ENV = dict(os.environ, JAX_PLATFORMS='cpu', TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=str(REPO))


def cli(*args, timeout=900):
  return subprocess.run([sys.executable, '-m', 'sharedbert.main', *args], cwd=REPO, env=ENV,
                        capture_output=True, text=True, timeout=timeout)


def listing(workdir: pathlib.Path):
  """Every path under workdir with its size and mtime; None if it does not exist."""
  if not workdir.exists():
    return None
  return {str(p.relative_to(workdir)): (p.stat().st_size, p.stat().st_mtime_ns)
          for p in [workdir, *sorted(workdir.rglob('*'))]}


@pytest.mark.parametrize('flag, message', [
    ('--config.optim.lrate=1e-3',
     "unknown config key config.optim.lrate (in --config.optim.lrate=1e-3); "
     "did you mean config.optim.lr?"),
    ('--config.colour=red',
     'unknown config key config.colour (in --config.colour=red); python -m sharedbert.main '
     '--config=configs/shared_base.py:tiny --helpfull lists the keys'),
    ('--config.total_steps=abc',
     "--config.total_steps=abc: config.total_steps takes an int, e.g. 1800 (invalid literal "
     "for int() with base 10: 'abc')"),
    ('--config.model.dropout_rate=high',
     "--config.model.dropout_rate=high: config.model.dropout_rate takes a float, e.g. 0.0 "
     "(could not convert string to float: 'high')"),
    ('--config=configs/no_such_variant.py',
     "cannot load the config file of --config=configs/no_such_variant.py ([Errno 2] No such "
     "file or directory: 'configs/no_such_variant.py'); pass an existing file, e.g. "
     "--config=configs/shared_base.py:tiny"),
    ('--config=configs/shared_base.py:size=huge',
     "unknown model size 'huge'; choose one of base, small, tiny, cpu30 (in "
     "--config=configs/shared_base.py:size=huge)"),
])
def test_config_mistakes_are_one_line_before_main(tmp_path, flag, message):
  workdir = tmp_path / 'run'
  result = cli('--config=configs/shared_base.py:tiny', flag, f'--workdir={workdir}')
  assert result.returncode == 2
  assert result.stderr == f'sharedbert: error: {message}\n'
  assert not workdir.exists()


def test_verbose_shows_the_traceback(tmp_path):
  result = cli('--config=configs/shared_base.py:tiny', '--config.total_steps=abc',
               f'--workdir={tmp_path / "run"}', '--verbose')
  assert result.returncode != 0
  assert 'Traceback (most recent call last)' in result.stderr
  assert 'sharedbert: error' not in result.stderr


@pytest.mark.parametrize('steps', ['0', '3000000000'])
def test_error_in_training_setup_through_the_command_line(tmp_path, steps):
  """0 steps, and a count past int32 (issue 56: an OverflowError traceback from inside a
  jitted computation), are one line each."""
  workdir = tmp_path / 'run'
  result = cli('--config=configs/shared_base.py:tiny', f'--config.total_steps={steps}',
               f'--workdir={workdir}')
  assert result.returncode == 2, result.stderr[-3000:]
  assert [l for l in result.stderr.splitlines() if 'error' in l.lower()] == [
      'sharedbert: error: total_steps must be a positive integer up to 2,147,483,647 (steps '
      f'are counted in int32), got {steps}']
  assert 'Traceback' not in result.stderr
  assert not workdir.exists()


# ---------------------------------------------------------------------------------------
# The checks of train_and_evaluate, in this process (8 CPU devices, see conftest.py).

@pytest.fixture
def corpus(tmp_path):
  path = tmp_path / 'corpus.txt'
  path.write_text(''.join(f'document {i} has some words in it, and more words.\n\n'
                          for i in range(60)))
  return path


def tiny_config(corpus, **overrides):
  config = sb_config.pretrain_config('shared', 'tiny')
  config.model.update(num_layers=1, hidden_size=32, num_heads=2, mlp_dim=64, vocab_size=512)
  config.data.update(batch_size=8, seq_len=32, max_predictions=5, corpus=str(corpus))
  for path, value in overrides.items():
    *parents, leaf = path.split('.')
    node = config
    for name in parents:
      node = node[name]
    node[leaf] = value
  return config


def not_text(tmp_path):
  path = tmp_path / 'corpus.bin'
  path.write_bytes(b'\x00\x01\x02 binary' * 100)
  return str(path)


def empty(tmp_path):
  path = tmp_path / 'empty.txt'
  path.write_text('\n\n   \n')
  return str(path)


def looping_link_in_dir(tmp_path):
  (tmp_path / 'texts').mkdir()
  (tmp_path / 'texts' / 'a.txt').write_text('some words here.\n')
  (tmp_path / 'texts' / 'loop.txt').symlink_to(tmp_path / 'texts' / 'loop.txt')
  return str(tmp_path / 'texts')


def looping_link(tmp_path):
  (tmp_path / 'loop.txt').symlink_to(tmp_path / 'loop.txt')
  return str(tmp_path / 'loop.txt')


def no_txt_files(tmp_path):
  (tmp_path / 'texts').mkdir()
  (tmp_path / 'texts' / 'notes.md').write_text('words')
  return str(tmp_path / 'texts')


@pytest.mark.parametrize('overrides, message', [
    (dict(total_steps=0), 'total_steps must be a positive integer up to 2,147,483,647'),
    ({'model.attention': 'sharde'}, "unknown attention variant 'sharde' (config.model.attention)"),
    ({'data.corpus': lambda t: str(t / 'missing.txt')}, 'corpus path {tmp}/missing.txt does '
     'not exist; set config.data.corpus to demo, a .txt file or directory, or tfds:NAME'),
    ({'data.corpus': empty}, 'corpus {tmp}/empty.txt is empty: no text found'),
    ({'data.corpus': not_text}, 'corpus file {tmp}/corpus.bin is not text (it contains NUL '
     'bytes)'),
    ({'data.corpus': no_txt_files}, 'corpus directory {tmp}/texts has no .txt files; point '
     'config.data.corpus at a .txt file or a directory of them'),
    ({'data.corpus': looping_link_in_dir}, 'corpus file {tmp}/texts/loop.txt cannot be read: '
     'a broken symbolic link or a loop of them; remove it or fix its target'),
    ({'data.corpus': looping_link}, 'corpus path {tmp}/loop.txt is a broken symbolic link or '
     'a loop of them; set config.data.corpus to demo, a .txt file or directory, or tfds:NAME'),
    ({'data.corpus': 'tfds:imdb_reviews', 'data.tfds_data_dir': lambda t: str(t / 'tfds')},
     "tfds dataset 'imdb_reviews/plain_text/1.0.0' is not prepared in {tmp}/tfds; this "
     'machine cannot download it. Prepare it where there is network access (tfds build '
     'imdb_reviews/plain_text --data_dir=DIR) and set config.data.tfds_data_dir=DIR'),
    ({'mesh.data': 3}, "mesh {'data': 3, 'fsdp': 1, 'tensor': 1} has 3 devices but 8 are "
     'available'),
    ({'data.batch_size': 12}, 'data.batch_size=12 is not divisible by the data-parallel size 8 '
     '(mesh.data * mesh.fsdp); choose a batch size that is a multiple of it'),
])
def test_bad_config_or_data_writes_nothing(tmp_path, corpus, overrides, message):
  resolved = {k: (v(tmp_path) if callable(v) else v) for k, v in overrides.items()}
  workdir = tmp_path / 'run'
  with pytest.raises(UserError) as e:
    train.train_and_evaluate(tiny_config(corpus, **resolved), str(workdir))
  assert message.replace('{tmp}', str(tmp_path)) in str(e.value)
  assert '\n' not in str(e.value)
  assert not workdir.exists()


# Values outside their range (sharedbert/config/validation.py): the message names the key and
# the range, and nothing is written. Issue #17's cases first.
OUT_OF_RANGE = [
    ({'ckpt.max_to_keep': 0},
     'ckpt.max_to_keep must be a positive integer (the newest checkpoints kept), got 0'),
    ({'optim.lr': float('nan')}, 'optim.lr must be a finite number > 0, got nan'),
    ({'optim.lr': -1.0}, 'optim.lr must be a finite number > 0, got -1.0'),
    ({'data.batch_size': -4}, 'data.batch_size must be a positive integer, got -4'),
    ({'data.batch_size': 0}, 'data.batch_size must be a positive integer, got 0'),
    ({'data.max_predictions': -1}, 'data.max_predictions must be an integer >= 0 (0: '
     'ceil(mask_rate * seq_len)), got -1'),
    ({'data.eval_mask_rate': 0.0}, 'data.eval_mask_rate must be a number in (0, 1), got 0.0'),
    ({'data.seq_len': 1}, 'data.seq_len must be an integer >= 2 ([CLS] and one token), got 1'),
    ({'model.vocab_size': 3}, 'model.vocab_size must be an integer >= 6 (the 5 special tokens '
     'and at least one piece), got 3'),
    ({'optim.grad_accum_steps': 0}, 'optim.grad_accum_steps must be a positive integer, got 0'),
    # And more of the table.
    ({'data.max_predictions': 40}, 'data.max_predictions must be an integer from 0 to '
     'data.seq_len=32 (0: ceil(mask_rate * seq_len)), got 40'),
    ({'data.seq_len': 600}, 'data.seq_len=600 exceeds model.max_position_embeddings=512; '
     'data.seq_len must be an integer from 2 to 512'),
    ({'data.mask_rate': 1.0}, 'data.mask_rate must be a number in (0, 1), got 1.0'),
    ({'optim.b2': 1.0}, 'optim.b2 must be a number in [0, 1), got 1.0'),
    ({'optim.weight_decay': float('inf')},
     'optim.weight_decay must be a finite number >= 0, got inf'),
    ({'optim.warmup_steps': -1}, 'optim.warmup_steps must be an integer in [0, 2,147,483,647], got -1'),
    ({'model.dropout_rate': 1.5}, 'model.dropout_rate must be a number in [0, 1), got 1.5'),
    ({'model.num_layers': 0}, 'model.num_layers must be a positive integer, got 0'),
    ({'mesh.fsdp': 0}, 'mesh.fsdp must be a positive integer, or -1 for all devices the '
     'other axes leave, got 0'),
    ({'eval_batches': -1}, 'eval_batches must be an integer >= 0 (0: every held-out batch), '
     'got -1'),
    ({'data.vocab_model_type': 'wordpiece'}, "data.vocab_model_type must be one of 'unigram', "
     "'bpe', 'char', 'word', got 'wordpiece'"),
]


@pytest.mark.parametrize('overrides, message', OUT_OF_RANGE,
                         ids=[next(iter(o)) + '=' + str(next(iter(o.values())))
                              for o, _ in OUT_OF_RANGE])
def test_values_out_of_range_write_nothing(tmp_path, corpus, overrides, message):
  workdir = tmp_path / 'run'
  with pytest.raises(UserError) as e:
    train.train_and_evaluate(tiny_config(corpus, **overrides), str(workdir))
  assert str(e.value) == message
  assert not workdir.exists()


def test_an_existing_workdir_is_left_as_it_was(tmp_path, corpus):
  workdir = tmp_path / 'run'
  workdir.mkdir()
  (workdir / 'notes.txt').write_text('mine')
  before = listing(workdir)
  with pytest.raises(UserError, match='data.batch_size must be a positive integer, got 0'):
    train.train_and_evaluate(tiny_config(corpus, **{'data.batch_size': 0}), str(workdir))
  assert listing(workdir) == before


def test_workdir_that_is_a_file(tmp_path, corpus):
  path = tmp_path / 'run'
  path.write_text('not a directory')
  for workdir, what in ((path, 'is'), (path / 'sub', f'is under {path}, which is')):
    with pytest.raises(UserError) as e:
      train.train_and_evaluate(tiny_config(corpus), str(workdir))
    assert str(e.value) == (f'--workdir {workdir} {what} not a directory; --workdir must be a '
                            'directory (new or existing)')
  assert path.read_text() == 'not a directory'


def test_every_preset_is_in_range():
  from sharedbert.config import checks as config_checks
  from sharedbert.models import params as params_lib
  from sharedbert.config import validation
  from sharedbert.data import tokenizer
  assert validation.NUM_SPECIAL_TOKENS == tokenizer.NUM_SPECIAL
  for path in sorted(REPO.glob('configs/*_base.py')):
    for arg in (None, 'tiny', 'small'):
      config_checks.pretrain(params_lib.load_config_file(str(path), arg))
  glue_config = params_lib.load_config_file(str(REPO / 'configs/glue.py'), 'cola')
  glue_config.init_from = 'somewhere'
  config_checks.glue(glue_config)
  for preset in ('cpu', 'gpu', 'pod'):  # A data folder as a user gives it (data=DIR).
    study_plan.check_config(params_lib.load_config_file(str(REPO / 'configs/study.py'),
                                                        f'{preset},data=/some/data'))


@pytest.mark.parametrize('flag, message', [
    ('--config.data.batch_size=0', 'data.batch_size must be a positive integer, got 0'),
    ('--config.optim.lr=nan', 'optim.lr must be a finite number > 0, got nan'),
    ('--config.ckpt.max_to_keep=0',
     'ckpt.max_to_keep must be a positive integer (the newest checkpoints kept), got 0'),
])
def test_values_out_of_range_through_the_command_line(tmp_path, flag, message):
  workdir = tmp_path / 'run'
  result = cli('--config=configs/shared_base.py:tiny', flag, f'--workdir={workdir}')
  assert result.returncode == 2, result.stderr[-3000:]
  assert [l for l in result.stderr.splitlines() if 'error' in l.lower()] == [
      f'sharedbert: error: {message}']
  assert 'Traceback' not in result.stderr
  assert not workdir.exists()


def test_workdir_that_is_a_file_through_the_command_line(tmp_path):
  path = tmp_path / 'run'
  path.write_text('not a directory')
  result = cli('--config=configs/shared_base.py:tiny', f'--workdir={path}')
  assert result.returncode == 2, result.stderr[-3000:]
  assert [l for l in result.stderr.splitlines() if 'error' in l.lower()] == [
      f'sharedbert: error: --workdir {path} is not a directory; --workdir must be a '
      'directory (new or existing)']
  assert path.read_text() == 'not a directory'


def test_a_vocabulary_the_corpus_cannot_fill_writes_nothing(tmp_path, corpus):
  workdir = tmp_path / 'run'
  # 40 documents of 200 distinct characters: more than 64 pieces just to spell them.
  (tmp_path / 'chars.txt').write_text('\n\n'.join(
      ' '.join(chr(0x4e00 + i) * 3 for i in range(200)) for _ in range(40)))
  config = tiny_config(tmp_path / 'chars.txt', **{'model.vocab_size': 64,
                                                  'data.eval_fraction': 0.5})
  with pytest.raises(UserError, match=r'^model.vocab_size=64 is too small for this corpus: its '
                     r'characters and the special tokens need at least \d+ pieces; raise '
                     r'model.vocab_size$'):
    train.train_and_evaluate(config, str(workdir))
  assert not workdir.exists()


# ---------------------------------------------------------------------------------------
# Non-finite steps: skipped, never saved, and a run that ends in them is not a success.

def poison_batches_from(monkeypatch, first_bad: int):
  """Makes the loss NaN from the `first_bad`-th batch of a run on (NaN mask weights)."""
  real = train.prefetch

  def prefetch(batches):
    def poisoned():
      for i, b in enumerate(batches):
        if i >= first_bad:
          b = dict(b, masked_weights=np.full_like(b['masked_weights'], np.nan))
        yield b
    return real(poisoned())
  monkeypatch.setattr(train, 'prefetch', prefetch)


def saved_steps_all_finite(workdir) -> list[int]:
  """The saved steps; fails if any holds a non-finite value."""
  import orbax.checkpoint as ocp
  steps = sorted(int(p.name) for p in (workdir / 'checkpoints').iterdir() if p.name.isdigit()) \
      if (workdir / 'checkpoints').exists() else []
  for step in steps:
    state = ocp.PyTreeCheckpointer().restore(str(workdir / 'checkpoints' / str(step) / 'state'))
    for leaf in jax.tree.leaves(state):
      assert np.all(np.isfinite(np.asarray(leaf))), step
  return steps


def short_run(corpus, **overrides):
  return tiny_config(corpus, total_steps=4, log_every_steps=1, eval_every_steps=4,
                     eval_batches=1, **{'ckpt.every_steps': 2, 'ckpt.async_save': False,
                                        'optim.max_skipped_steps': 100, **overrides})


def test_a_pretraining_run_builds_its_model_config_once(tmp_path, corpus, monkeypatch):
  # One preflight checks the whole config and hands the run what it built (issue 45).
  calls = []
  build = ModelConfig.from_config.__func__

  def counted(cls, model_cfg):
    calls.append(1)
    return build(cls, model_cfg)

  monkeypatch.setattr(ModelConfig, 'from_config', classmethod(counted))
  workdir = tmp_path / 'run'
  for total_steps in (2, 4):  # A new run, then the same workdir resumed.
    calls.clear()
    config = short_run(corpus)
    config.total_steps = total_steps
    train.train_and_evaluate(config, str(workdir))
    assert len(calls) == 1, f'ModelConfig.from_config ran {len(calls)} times in one run'


def test_nan_learning_rate_is_skipped_from_the_first_step_and_never_saved(
    tmp_path, corpus, monkeypatch):
  # The range check refuses optim.lr=nan; without it, the step itself must hold.
  monkeypatch.setattr(train.config_checks, 'pretrain',
                      lambda config: ModelConfig.from_config(config.model))
  workdir = tmp_path / 'run'
  with pytest.raises(errors.Diverged) as e:
    train.train_and_evaluate(short_run(corpus, **{'optim.lr': float('nan')}), str(workdir))
  assert str(e.value).startswith('the last 4 step(s) (up to step 4, the last) had a '
                                 'non-finite loss, gradient or update: the final state was not '
                                 'saved, and no checkpoint was saved.')
  assert saved_steps_all_finite(workdir) == []
  rows = [json.loads(l) for l in (workdir / 'metrics.jsonl').read_text().splitlines()]
  assert [r['skipped'] for r in rows if 'skipped' in r] == [1.0] * 4


def test_a_run_ending_in_non_finite_steps_keeps_the_last_good_checkpoint(
    tmp_path, corpus, monkeypatch):
  poison_batches_from(monkeypatch, 2)  # Steps 1, 2 good; 3, 4 NaN.
  workdir = tmp_path / 'run'
  with pytest.raises(errors.Diverged) as e:
    train.train_and_evaluate(short_run(corpus), str(workdir))
  assert str(e.value).startswith(
      'the last 2 step(s) (up to step 4, the last) had a non-finite loss, gradient or update: '
      f'the final state was not saved, and the last good checkpoint (step 2) is kept in '
      f'{workdir}/checkpoints.')
  assert saved_steps_all_finite(workdir) == [2]


def test_preemption_inside_non_finite_steps_saves_nothing(tmp_path, corpus, monkeypatch):
  poison_batches_from(monkeypatch, 2)
  monkeypatch.setattr(checkpoint_lib.Checkpointer, 'reached_preemption',
                      lambda self, step: step == 3)
  workdir = tmp_path / 'run'
  with pytest.raises(train.Preempted) as e:
    train.train_and_evaluate(short_run(corpus), str(workdir))
  assert str(e.value) == (f'preempted at step 3, inside 1 non-finite step(s): not saved, and '
                          f'the last good checkpoint (step 2) is kept in {workdir}/checkpoints; '
                          'run again to resume from it')
  assert saved_steps_all_finite(workdir) == [2]


def test_non_finite_state_is_never_saved(tmp_path, corpus, monkeypatch):
  """The last guard: a state with a NaN that slipped past the step is refused at the save."""
  real = pretrain_step.jit_steps

  def jit_steps(*args, **kwargs):
    step_fn, eval_fn = real(*args, **kwargs)

    class Poisoning:  # The real step, then a NaN written into the parameters at step 2.
      def lower(self, state, batch):
        compiled = step_fn.lower(state, batch).compile()

        class Compiled:
          def compile(self):
            return self

          def memory_analysis(self):
            return None

          def __call__(self, state, batch):
            state, metrics = compiled(state, batch)
            if int(state.step) == 2:
              state = state.replace(params=jax.tree.map(lambda x: x * np.nan, state.params))
            return state, metrics
        return Compiled()
    return Poisoning(), eval_fn
  monkeypatch.setattr(train, 'jit_steps', jit_steps)
  workdir = tmp_path / 'run'
  with pytest.raises(errors.Diverged) as e:
    train.train_and_evaluate(short_run(corpus), str(workdir))
  assert str(e.value).startswith('the parameters or optimizer state at step 2 are not finite: '
                                 'not saved, and no checkpoint was saved.')
  assert saved_steps_all_finite(workdir) == []


@pytest.fixture
def workdir_of_another_model(tmp_path):
  """A workdir whose checkpoint is of `standard` attention, width 64."""
  workdir = tmp_path / 'run'
  ckpt = checkpoint_lib.Checkpointer(str(workdir), ml_collections.ConfigDict(
      dict(every_steps=1, max_to_keep=3, async_save=False)))
  model = tiny_config('demo').model.to_dict()
  model.update(attention='standard', hidden_size=64)
  ckpt.save(5, {'w': np.zeros(3, np.float32)}, {'model': model, 'data_position': 5}, force=True)
  ckpt.wait()
  ckpt.close()
  (workdir / 'metrics.jsonl').write_text('{"step": 5, "loss": 6.0}\n')
  return workdir


def test_checkpoint_of_another_model_is_refused(corpus, workdir_of_another_model):
  workdir = workdir_of_another_model
  before = listing(workdir)
  with pytest.raises(UserError) as e:
    train.train_and_evaluate(tiny_config(corpus), str(workdir))
  assert str(e.value) == (
      f"the checkpoint in {workdir} is of another model (attention: checkpoint 'standard' vs "
      "config 'shared'; hidden_size: checkpoint 64 vs config 32); use another --workdir, or "
      'pass --config.restart=True to set the old run aside and start over')
  assert listing(workdir) == before


def test_restart_sets_the_old_run_aside(corpus, workdir_of_another_model):
  workdir = workdir_of_another_model
  config = tiny_config(corpus, restart=True)
  assert train.check_workdir(config, str(workdir)) is True
  train._set_aside_old_run(str(workdir))
  [aside] = [p for p in workdir.iterdir()]
  assert aside.name.startswith('replaced-')
  assert sorted(p.name for p in aside.iterdir()) == ['checkpoints', 'metrics.jsonl']
  assert train.check_workdir(config, str(workdir)) is False


def test_workdir_locked_by_a_live_run(corpus, tmp_path):
  workdir = tmp_path / 'run'
  holder = workdir_lock.WorkdirLock(str(workdir))
  holder.acquire()  # flock: a second open file description conflicts, even in one process.
  try:
    before = listing(workdir)
    with pytest.raises(UserError) as e:
      train.train_and_evaluate(tiny_config(corpus), str(workdir))
    assert str(e.value).startswith(f'workdir {workdir} is in use by another run (pid '
                                   f'{os.getpid()} on host ')
    assert listing(workdir) == before
  finally:
    holder.release()
  assert not workdir.exists()  # The lock created it and, empty, removed it.


def test_stale_lock_file_does_not_block(tmp_path):
  workdir = tmp_path / 'run'
  workdir.mkdir()
  (workdir / workdir_lock.LOCK_FILE).write_text('pid 999999 on host gone, started long ago\n')
  with workdir_lock.hold(str(workdir)):
    assert f'pid {os.getpid()} ' in (workdir / workdir_lock.LOCK_FILE).read_text()
  assert list(workdir.iterdir()) == []


def test_metrics_after_the_resume_step_are_dropped(tmp_path):
  path = tmp_path / 'metrics.jsonl'
  path.write_text('{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.5}\n'
                  '{"step": 2, "eval_loss": 2.4}\n{"step": 3, "loss": 2.0}\n{"step": 4, "lo')
  assert metric_writer.drop_lines_after(str(path), 2) == 2  # Step 3 and the torn line.
  assert path.read_text() == ('{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.5}\n'
                              '{"step": 2, "eval_loss": 2.4}\n')
  assert metric_writer.drop_lines_after(str(path), 2) == 0
  assert not (tmp_path / 'metrics.jsonl.tmp').exists()


# ---------------------------------------------------------------------------------------
# GLUE data (the reader the fine-tuning command uses).

def test_glue_missing_split_and_malformed_row(tmp_path):
  (tmp_path / 'RTE').mkdir()
  (tmp_path / 'RTE' / 'train.tsv').write_text(
      'index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tentailment\n1\tA.\tnot_entailment\n')
  with pytest.raises(UserError) as e:
    glue.read_glue_dir(str(tmp_path), 'rte', 'train')
  assert str(e.value).startswith(f'{tmp_path}/RTE/train.tsv:3: expected 4 tab-separated '
                                 'columns, found 3; fix or remove this row')
  with pytest.raises(UserError) as e:
    glue.read_glue_dir(str(tmp_path), 'rte', 'validation')
  assert str(e.value).startswith(f'GLUE split file missing: {tmp_path}/RTE/dev.tsv not found')
  for error in (e.value,):
    assert '\n' not in str(error)


def test_resume_check_compares_what_changes_the_model():
  from sharedbert.models.bert import ModelConfig
  masa = ModelConfig(attention='masa', num_layers=6, masa_atoms=0)   # 0: ceil(6/3) = 2 atoms.
  meta = {'model': ModelConfig(attention='masa', num_layers=6, masa_atoms=2).to_dict()}
  train._check_compatible(meta, masa, 'W')  # The same model: no error.
  meta = {'model': ModelConfig(attention='masa', num_layers=6, masa_atoms=3).to_dict()}
  with pytest.raises(UserError, match='masa_atoms: checkpoint 3 vs config 2'):
    train._check_compatible(meta, masa, 'W')
  # Another variant's setting (in a checkpoint written when every model carried them all)
  # does not matter to `standard`.
  meta = {'model': {**ModelConfig(attention='standard').to_dict(), 'qk_shared_fraction': 0.25}}
  train._check_compatible(meta, ModelConfig(attention='standard'), 'W')
  with pytest.raises(UserError, match='hidden_size'):
    train._check_compatible(meta, ModelConfig(attention='standard', hidden_size=384,
                                              num_heads=6), 'W')
