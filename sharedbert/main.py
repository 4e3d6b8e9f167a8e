r"""The entry point: `python -m sharedbert.main --config=CONFIG[:ARG] --workdir=DIR`.

  --config   an ml_collections config file with get_config(arg), e.g.
             configs/shared_base.py:tiny; override any field with --config.a.b=value.
  --workdir  where the run writes everything (config, vocabulary, metrics, checkpoints);
             running the same command again resumes from the latest checkpoint.
  --verbose  show the full traceback of a user error.

Dispatches on config.mode: 'pretrain' (sharedbert.train), 'finetune' (sharedbert.finetune,
configs/glue.py). Exit codes: 0 done; 2 a user
error (one line on stderr, the workdir left as it was); 143 preempted by SIGTERM after
saving a checkpoint (run the same command again to resume).
"""

from __future__ import annotations

import logging as logging_std
import os
import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from sharedbert.errors import UserError

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file('config', None, 'Experiment config file (see configs/).',
                                lock_config=True)
flags.DEFINE_string('workdir', None, 'Directory for everything this run writes.')
flags.DEFINE_bool('verbose', False, 'Show tracebacks of user errors.')
flags.mark_flags_as_required(['config', 'workdir'])


def _init_distributed():
  """Joins the other processes when launched on a pod or a cluster (see launch/)."""
  import jax
  if os.environ.get('SHAREDBERT_DISTRIBUTED', '') == '1' or any(
      v in os.environ for v in ('TPU_WORKER_HOSTNAMES', 'SLURM_NTASKS')) and int(
          os.environ.get('SLURM_NTASKS', '2')) > 1:
    jax.distributed.initialize()


def run(config, workdir: str) -> dict:
  import tensorflow as tf
  # TensorFlow only feeds data: keep it off the accelerators JAX uses.
  tf.config.set_visible_devices([], 'GPU')
  tf.config.set_visible_devices([], 'TPU') if tf.config.list_physical_devices('TPU') else None
  mode = config.get('mode', 'pretrain')
  if mode == 'pretrain':
    from sharedbert import train
    return train.train_and_evaluate(config, workdir)
  if mode == 'finetune':
    from sharedbert import finetune
    return finetune.finetune_and_evaluate(config, workdir)
  if mode == 'study':
    from sharedbert import study
    return {'report': study.run_study(config, workdir)}
  raise UserError(f'unknown config.mode {mode!r}')


class _QuietLibraries(logging_std.Filter):
  """Drops the INFO chatter of orbax and friends; warnings and errors still show."""
  NOISY = ('/orbax/', '/tensorstore/', '/etils/', '/jax/_src/')

  def filter(self, record):
    return record.levelno >= logging_std.WARNING or not any(
        n in record.pathname for n in self.NOISY)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  logging.get_absl_handler().addFilter(_QuietLibraries())
  from sharedbert import train
  try:
    _init_distributed()
    run(FLAGS.config, FLAGS.workdir)
  except UserError as e:
    if FLAGS.verbose:
      raise
    print(f'sharedbert: error: {e}', file=sys.stderr)
    sys.exit(2)
  except train.Preempted as e:
    logging.warning('%s', e)
    sys.exit(train.PREEMPTED_EXIT_CODE)


def entry():
  app.run(main)


if __name__ == '__main__':
  entry()
