"""Flag parsing for every command: a mistake in a flag or the config is one line, exit 2.

absl parses the flags (and loads --config, applies --config.KEY=VALUE) before main()
runs, so a nonexistent config file, an unknown config key or a value of the wrong type
would otherwise end in a traceback. `flags_parser(program, module)` is the
`flags_parser` of `app.run` for each command; --verbose shows the traceback instead.
"""

from __future__ import annotations

import difflib
import importlib
import logging as logging_std
import os
import sys
from typing import Callable

from absl import flags
from absl import logging
from ml_collections.config_flags import config_path

from sharedbert import interrupts
from sharedbert.errors import USER_ERROR_EXIT_CODE, UserError

FLAGS = flags.FLAGS
HELP_FLAGS = ('--help', '-help', '--helpshort', '-helpshort', '--helpfull', '-helpfull', '-?',
              '--?')


def _verbose_requested(argv: list[str]) -> bool:
  return any(a in ('--verbose', '-verbose') or a.lower() in ('--verbose=true', '--verbose=1')
             for a in argv)


def _a(type_name: str) -> str:
  return f'an {type_name}' if type_name[0] in 'aeiou' else f'a {type_name}'


def _unknown_override(argv: list[str], config_arg: str, module: str) -> str:
  """Names the --config.KEY override whose key does not exist, with a close match if any."""
  from ml_collections.config_flags.config_flags import ConfigFileFlagParser
  config = ConfigFileFlagParser('config', lock_config=False).parse(config_arg)
  for arg in argv:
    if not arg.startswith('--config.'):
      continue
    path = arg[len('--config.'):].split('=', 1)[0]
    try:
      config_path.get_value(path, config)
      continue
    except (AttributeError, KeyError, IndexError, ValueError):
      pass
    parent, _, leaf = path.rpartition('.')
    try:
      keys = list((config_path.get_value(parent, config) if parent else config).keys())
    except Exception:  # pylint: disable=broad-except
      keys = []
    close = difflib.get_close_matches(leaf, keys, n=1, cutoff=0.5)
    hint = (f'did you mean config.{parent + "." if parent else ""}{close[0]}?' if close else
            f'python -m {module} --config={config_arg} --helpfull lists the keys')
    return f'unknown config key config.{path} (in {arg}); {hint}'
  return f'unknown config key in {" ".join(a for a in argv if a.startswith("--config."))}'


def flag_error_message(error: Exception, argv: list[str], module: str) -> str | None:
  """One line for a mistake in the flags or the config, or None for a bug (traceback).

  Args:
    error: what flag parsing raised.
    argv: the command line.
    module: the command's module.
  Returns:
    The line, or None.
  """
  config_arg = ([a.split('=', 1)[1] for a in argv if a.startswith('--config=')] or [''])[-1]
  if isinstance(error, UserError):  # Raised by the config file's get_config(arg).
    return f'{error} (in --config={config_arg})'
  if isinstance(error, (AttributeError, KeyError)):  # An override of a key that does not exist.
    try:
      return _unknown_override(argv, config_arg, module)
    except Exception:  # pylint: disable=broad-except
      return None
  if isinstance(error, OSError):  # The config file itself did not load.
    detail = str(error).strip().splitlines()[-1].strip()
    return (f'cannot load the config file of --config={config_arg} ({detail}); pass an '
            'existing file, e.g. --config=configs/shared_base.py:tiny')
  first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
  if isinstance(error, flags.IllegalFlagValueError) and first_line.startswith('flag --config.'):
    flag, _, detail = first_line[len('flag '):].partition(': ')
    name = flag.split('=', 1)[0][2:]
    try:
      default = config_path.get_value(name[len('config.'):], FLAGS['config'].value)
      example = f', e.g. {default!r}' if len(repr(default).splitlines()) == 1 else ''
      expected = f'{name} takes {_a(type(default).__name__)}{example}'
    except Exception:  # pylint: disable=broad-except
      expected = f'check the value of {name}'
    return f'{flag}: {expected} ({detail})'
  if isinstance(error, flags.Error):
    return f'{first_line} (python -m {module} --helpfull lists the flags)'
  return None


# Every flag of every command that names a file or folder (config keys are the config's).
PATH_FLAGS = ('workdir', 'hf_dir', 'source', 'target', 'encoder', 'data', 'fit_text',
              'summary', 'out', 'out_json', 'out_md', 'corpus')


def user_path(value: str) -> str:
  """A path as the user typed it, resolved once: ~ expanded, relative made absolute against
  the current directory. URLs (gs://...), tfds corpora and the demo corpus stay as they are.

  Args:
    value: the flag's value.
  Returns:
    The path.
  """
  if not value or '://' in value or value.startswith('tfds:') or value == 'demo':
    return value
  return os.path.abspath(os.path.expanduser(value))


# The config kinds (config.mode) each command takes, and where such a config lives.
CONFIG_MODES = {
    'sharedbert.main': ('pretrain', 'finetune', 'study'),
    'sharedbert.models.params': ('pretrain',),
    'sharedbert.convert.hf': ('pretrain',),
    'sharedbert.lab.study': ('study',),
    'sharedbert.lab.uptrain': ('uptrain',),
    'sharedbert.lab.probe': ('probe',),
}
CONFIG_FILES = {'pretrain': 'configs/<variant>_base.py', 'finetune': 'configs/glue.py',
                'study': 'configs/study.py', 'uptrain': 'configs/uptrain.py',
                'probe': 'configs/probe.py'}


def config_kind_error(module: str, mode) -> str | None:
  """One line when --config is of a kind the command does not take, else None.

  Args:
    module: the command's module.
    mode: the config's mode.
  Returns:
    The line, or None.
  """
  allowed = CONFIG_MODES.get(module)
  if allowed is None or mode in allowed:
    return None
  wanted = ' or '.join(f'a {m} config ({CONFIG_FILES[m]})' for m in allowed)
  return f'--config is a {mode} config; this command takes {wanted}'


def resolve_path_flags() -> None:
  """Resolves every path flag the command defines (`PATH_FLAGS`) in place: a relative
  --workdir crashed GLUE's checkpointing after training, and --workdir=~/x made ./~/x.

  Returns:
    None.
  """
  for name in PATH_FLAGS:
    if name in FLAGS and isinstance(FLAGS[name].value, str):
      FLAGS[name].value = user_path(FLAGS[name].value)


class QuietLibraries(logging_std.Filter):
  """Drops the INFO chatter of JAX and friends ('Unable to initialize backend tpu', ...)
  so that a command's log and its one-line errors stand out; their warnings and errors
  still show. Orbax's own lines are dropped at every level unless --verbose: its warnings
  are about the read-only readers sharedbert opens on purpose ('Given directory is read
  only'), and its errors report failed writes, which sharedbert says in one line itself
  (checkpoint.WriteFailed) as it does damaged checkpoints (checkpoint.Checkpointer.restore)."""
  NOISY = ('/orbax/', '/tensorstore/', '/etils/', '/jax/_src/')

  def filter(self, record):
    if '/orbax/' in record.pathname:
      return 'verbose' in FLAGS and bool(FLAGS.verbose)
    return record.levelno >= logging_std.WARNING or not any(
        n in record.pathname for n in self.NOISY)


def flags_parser(program: str, module: str) -> Callable[[list[str]], list[str]]:
  """absl's flag parsing, with a mistake said as `PROGRAM: error: ...` and exit 2.

  Config overrides are checked here, before main() runs: an unknown key, a value of the
  wrong type, a config file that does not load.

  Args:
    program: the name messages use ('sharedbert train').
    module: the command's module.
  Returns:
    argv -> the arguments left after the flags (absl's flags_parser).
  """
  def parse(argv: list[str]) -> list[str]:
    logging.get_absl_handler().addFilter(QuietLibraries())
    try:
      rest = FLAGS(argv)
      resolve_path_flags()
      if 'config' in FLAGS and (FLAGS['config'].present or FLAGS['config'].value is not None):
        # A config file that failed to load raises only when used.
        mode = FLAGS.config.get('mode', 'pretrain') if FLAGS.config is not None else None
        wrong = config_kind_error(module, mode) if FLAGS.config is not None else None
        if wrong:
          print(f'{program}: error: {wrong}', file=sys.stderr)
          sys.exit(USER_ERROR_EXIT_CODE)
      return rest
    except SystemExit as e:
      # absl prints the help asked for, then exits 1; asking for help is not a failure.
      if e.code == 1 and any(a.split('=', 1)[0] in HELP_FLAGS for a in argv[1:]):
        sys.exit(0)
      raise
    except Exception as e:  # pylint: disable=broad-except
      message = flag_error_message(e, argv, module)
      if message is None or _verbose_requested(argv):
        raise
      print(f'{program}: error: {message}', file=sys.stderr)
      sys.exit(USER_ERROR_EXIT_CODE)
  return parse


# config.mode -> (module, function(config, workdir)): loaded by name, as the subcommands are,
# since the dispatch sits above every module it loads (the study imports this module).
MODES = {
    'pretrain': ('sharedbert.train', 'train_and_evaluate'),
    'finetune': ('sharedbert.tasks.finetune', 'finetune_and_evaluate'),
    'study': ('sharedbert.lab.study', 'run_study'),
}
# config.mode -> the checks of its values (sharedbert/config/checks.py), run before
# TensorFlow and the mode's module load: a value out of range is said in about 3 s (JAX's
# import) instead of about 12. The mode's function runs them again, for notebooks.
MODE_CHECKS = {
    'pretrain': 'pretrain',
    'finetune': 'finetune',
}


def load_run(config) -> Callable[[str], object]:
  """The run of a parsed --config, by config.mode (pretraining, fine-tuning or the study):
  its module is loaded now, so that `python -m sharedbert.main` says a flag or config
  mistake before JAX and TensorFlow load (seconds). Returns run(workdir) -> what the mode's
  function returns; it joins the other processes of a multi-process launch first.

  Args:
    config: the parsed --config.
  Returns:
    As above.
  """
  mode = config.get('mode', 'pretrain')
  if mode not in MODES:
    raise UserError(f'unknown config.mode {mode!r}')
  if mode in MODE_CHECKS:
    from sharedbert.config import checks
    getattr(checks, MODE_CHECKS[mode])(config)
  import tensorflow as tf
  from sharedbert import distributed
  module, function = MODES[mode]
  start = getattr(importlib.import_module(module), function)

  def run(workdir: str):
    distributed.initialize()
    # TensorFlow only feeds data: keep it off the accelerators JAX uses.
    tf.config.set_visible_devices([], 'GPU')
    if tf.config.list_physical_devices('TPU'):
      tf.config.set_visible_devices([], 'TPU')
    return start(config, workdir)
  return run


# ---------------------------------------------------------------------------------------
# `sharedbert <subcommand>`: the console script (setup.py), one name for every entry point.

SUBCOMMANDS = {
    'run': ('sharedbert.main', 'pretrain or fine-tune: --config=CONFIG[:ARG] --workdir=DIR '
                               '(what `python -m sharedbert.main` does)'),
    'study': ('sharedbert.lab.study',
              'the controlled study: every variant pretrained, then GLUE'),
    'probe': ('sharedbert.lab.probe', 'attention probes: synthetic tasks per variant'),
    'params': ('sharedbert.models.params', 'the parameter report of one or all variants'),
    'bench': ('sharedbert.lab.bench', 'benchmarks: step time, MFU, memory, input pipeline'),
    'convert_hf': ('sharedbert.convert.hf', 'Hugging Face checkpoints: import | export'),
    'convert_shared': ('sharedbert.convert.shared',
                       'a standard checkpoint to shared, symmetric, kv_shared or masa '
                       'attention'),
    'conversion': ('sharedbert.lab.conversion',
                   'a real encoder converted by every fit, scored zero-shot on STS-B'),
    'uptrain': ('sharedbert.lab.uptrain',
                'a real encoder converted to shared attention and trained on, against controls'),
    'recipe_ablation': ('sharedbert.lab.recipe_ablation',
                        'the budget recipe, one change left out at a time'),
}


def usage() -> str:
  """The text of `sharedbert --help`: how to call it and every subcommand.

  Returns:
    The text.
  """
  width = max(len(name) for name in SUBCOMMANDS)
  lines = ['usage: sharedbert SUBCOMMAND [flags]     (sharedbert SUBCOMMAND --help: its flags)',
           '       sharedbert --config=CONFIG[:ARG] --workdir=DIR   (the same as `sharedbert run`)',
           '', 'subcommands:']
  lines += [f'  {name.ljust(width)}  {text}' for name, (_, text) in SUBCOMMANDS.items()]
  return '\n'.join(lines)


def command(argv: list[str] | None = None) -> None:
  """The `sharedbert` console script: runs the subcommand's module as `python -m` would.

  Args:
    argv: the command line (None: sys.argv).
  Returns:
    None.
  """
  import runpy
  interrupts.quit_at_once('sharedbert')
  argv = list(sys.argv if argv is None else argv)
  first = argv[1] if len(argv) > 1 else ''
  if first in ('', '-h', '--help', '-help', 'help'):
    print(usage())
    sys.exit(0 if first else USER_ERROR_EXIT_CODE)
  if first.startswith('-'):
    name = 'run'  # Flags only: the main command, as before subcommands existed.
  elif first in SUBCOMMANDS:
    name = first
    argv = argv[:1] + argv[2:]
  else:
    close = difflib.get_close_matches(first, list(SUBCOMMANDS), n=1)
    hint = f'did you mean {close[0]}? ' if close else ''
    print(f'sharedbert: error: unknown subcommand {first!r}; {hint}sharedbert --help lists '
          'them', file=sys.stderr)
    sys.exit(USER_ERROR_EXIT_CODE)
  module = SUBCOMMANDS[name][0]
  sys.argv = [f'sharedbert {name}'] + argv[1:]
  runpy.run_module(module, run_name='__main__', alter_sys=True)
