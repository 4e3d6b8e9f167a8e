r"""The entry point: `python -m sharedbert.main --config=CONFIG[:ARG] --workdir=DIR`.

  --config   an ml_collections config file with get_config(arg), e.g.
             configs/shared_base.py:tiny; override any field with --config.a.b=value.
  --workdir  where the run writes everything (config, vocabulary, metrics, checkpoints);
             running the same command again resumes from the latest checkpoint.
  --verbose  show the full traceback of a user error.

Dispatches on config.mode: 'pretrain' (sharedbert.train), 'finetune' (sharedbert.tasks.finetune,
configs/glue.py). Exit codes:
  0    done.
  2    a user error: a bad flag, config value, path or workdir, said in one line on stderr
       (the traceback with --verbose); the workdir is left as it was.
  3    stopped after optim.max_skipped_steps consecutive non-finite steps, or the run's
       last steps were non-finite; the last good checkpoint is kept (lower optim.lr, then
       run the same command to resume). No checkpoint holds a non-finite value.
  4    a checkpoint or the metrics could not be written (disk full, no permission, a
       quota): stopped at once, with one line on stderr; the last finalised checkpoint is
       kept, and the same command resumes from it once there is room.
  130  stopped by Ctrl-C (SIGINT): saved as at a preemption, below.
  143  preempted (SIGTERM, or orbax's preemption notice) after saving a checkpoint at the
       current step: run the same command again to resume.
A run killed outright (SIGKILL, a lost node) resumes from its last checkpoint when the
same command is run again.
"""

from __future__ import annotations

if __name__ == '__main__':  # First: a Ctrl-C while the imports below load is one line.
  from sharedbert import interrupts as _interrupts
  _interrupts.quit_at_once('sharedbert')

import glob
import importlib.util
import os
import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags
import jax

from sharedbert import cli
from sharedbert import errors
from sharedbert import interrupts
from sharedbert.errors import USER_ERROR_EXIT_CODE, UserError
from sharedbert import checkpoint as checkpoint_lib
from sharedbert import train
from sharedbert.lab import study
from sharedbert.tasks import finetune

WRITE_FAILED_EXIT_CODE = 4

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file('config', None, 'Experiment config file (see configs/).',
                                lock_config=True)
flags.DEFINE_string('workdir', None, 'Directory for everything this run writes.')
flags.DEFINE_bool('verbose', False, 'Show tracebacks of user errors.')
flags.mark_flags_as_required(['config', 'workdir'])


def distributed_args(environ) -> dict | None:
  """The arguments of `jax.distributed.initialize` for this launch, or None for one process.

  In order: SHAREDBERT_DISTRIBUTED=0 turns it off; JAX_COORDINATOR_ADDRESS with
  JAX_NUM_PROCESSES and JAX_PROCESS_ID set everything explicitly (launch/local_multihost.sh,
  or any launcher); inside an srun step of several tasks the count and rank come from
  SLURM (and the coordinator from JAX_COORDINATOR_ADDRESS when the sbatch script sets it);
  on a Cloud TPU VM (libtpu and /dev/accel* or /dev/vfio present), on GKE TPU slices
  (TPU_WORKER_HOSTNAMES), or with SHAREDBERT_DISTRIBUTED=1, JAX detects the rest itself.
  """
  mode = environ.get('SHAREDBERT_DISTRIBUTED', 'auto')
  if mode == '0':
    return None
  coordinator = environ.get('JAX_COORDINATOR_ADDRESS') or None
  if 'JAX_NUM_PROCESSES' in environ or 'JAX_PROCESS_ID' in environ:
    missing = [v for v in ('JAX_COORDINATOR_ADDRESS', 'JAX_NUM_PROCESSES', 'JAX_PROCESS_ID')
               if not environ.get(v)]
    if missing:
      raise UserError(f'multi-process launch: {", ".join(missing)} not set; set all of '
                      'JAX_COORDINATOR_ADDRESS (host:port), JAX_NUM_PROCESSES and JAX_PROCESS_ID')
    try:
      num_processes, process_id = int(environ['JAX_NUM_PROCESSES']), int(environ['JAX_PROCESS_ID'])
    except ValueError as e:
      raise UserError(f'JAX_NUM_PROCESSES and JAX_PROCESS_ID must be integers ({e})') from e
    if num_processes == 1:
      return None
    # Everything is given: no cluster detection (it would trust SLURM or MPI variables).
    return dict(coordinator_address=coordinator, num_processes=num_processes,
                process_id=process_id, cluster_detection_method='deactivate')
  # srun sets SLURM_STEP_NUM_TASKS; a batch script (one process, no srun) does not.
  slurm_tasks = environ.get('SLURM_STEP_NUM_TASKS')
  if slurm_tasks and 'SLURM_PROCID' in environ:
    if int(slurm_tasks) == 1:
      return None
    # One process per task; JAX makes GPU number SLURM_LOCALID this process's device.
    return dict(coordinator_address=coordinator, num_processes=int(slurm_tasks),
                process_id=int(environ['SLURM_PROCID']))
  on_tpu_vm = importlib.util.find_spec('libtpu') is not None and bool(
      glob.glob('/dev/accel*') or glob.glob('/dev/vfio/[0-9]*'))
  if mode == '1' or on_tpu_vm or 'TPU_WORKER_HOSTNAMES' in environ:
    return dict(coordinator_address=coordinator)
  return None


def _init_distributed():
  """Joins the other processes when launched on a pod or a cluster (see launch/).

  Only process 0 logs at INFO; the others keep warnings and errors.
  """
  args = distributed_args(os.environ)
  if args is None:
    return
  # CPU processes (launch/local_multihost.sh) exchange their collectives through gloo.
  jax.config.update('jax_cpu_collectives_implementation',
                    os.environ.get('JAX_CPU_COLLECTIVES_IMPLEMENTATION', 'gloo'))
  try:
    jax.distributed.initialize(**args)
  except ValueError as e:  # JAX could not work out the coordinator, count or rank.
    raise UserError(f'could not start the multi-process run ({str(e).splitlines()[0]}); set '
                    'JAX_COORDINATOR_ADDRESS=host:port, JAX_NUM_PROCESSES and JAX_PROCESS_ID, '
                    'or SHAREDBERT_DISTRIBUTED=0 for a single process') from e
  if jax.process_index() != 0:
    logging.set_verbosity(logging.WARNING)
  logging.info('Process %d of %d; %d local devices of %d', jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())


def run(config, workdir: str) -> dict:
  """Runs `config` (by config.mode: pretraining, fine-tuning or the study) in `workdir`;
  returns its last metrics."""
  import tensorflow as tf
  # TensorFlow only feeds data: keep it off the accelerators JAX uses.
  tf.config.set_visible_devices([], 'GPU')
  tf.config.set_visible_devices([], 'TPU') if tf.config.list_physical_devices('TPU') else None
  mode = config.get('mode', 'pretrain')
  if mode == 'pretrain':
    return train.train_and_evaluate(config, workdir)
  if mode == 'finetune':
    return finetune.finetune_and_evaluate(config, workdir)
  if mode == 'study':
    return {'report': study.run_study(config, workdir)}
  raise UserError(f'unknown config.mode {mode!r}')


def _quiet_closed_event_loops(hook):
  """sys.excepthook without the 'Event loop is closed' errors that tensorstore's callbacks
  print (through PyErr_Print) when an orbax write fails and its event loop is gone: the
  failure itself is said in one line (checkpoint.WriteFailed)."""
  def quiet(kind, value, tb):
    if not (kind is RuntimeError and str(value) == 'Event loop is closed'):
      hook(kind, value, tb)
  return quiet


def main(argv):
  """absl's main: runs --config in --workdir, turning errors into exit codes (the module
  docstring)."""
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if not FLAGS.verbose:
    sys.excepthook = _quiet_closed_event_loops(sys.excepthook)
  try:
    with interrupts.stop_on_signals():
      _init_distributed()
      run(FLAGS.config, FLAGS.workdir)
  except checkpoint_lib.WriteFailed as e:
    if FLAGS.verbose:
      raise
    # Orbax's writer threads may still hold the failed save; a normal interpreter exit
    # would wait on them and print their tracebacks. Finalised checkpoints are on disk.
    errors.exit_now(f'sharedbert: error: {e}', WRITE_FAILED_EXIT_CODE)
  except UserError as e:
    if FLAGS.verbose:
      raise
    code = train.DIVERGED_EXIT_CODE if isinstance(e, train.Diverged) else USER_ERROR_EXIT_CODE
    if isinstance(e, checkpoint_lib.Unrestorable):
      # Nothing was written; skip the interpreter's teardown of tensorstore's readers.
      errors.exit_now(f'sharedbert: error: {e}', code)
    print(f'sharedbert: error: {e}', file=sys.stderr)
    sys.exit(code)
  except interrupts.Stopped as e:  # Pretraining's train.Preempted, or a GLUE or study stop.
    print(f'sharedbert: {e}', file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(e.exit_code)  # 143 for SIGTERM, 130 for Ctrl-C.
  except OSError as e:  # A write the disk refused outside a checkpoint (GLUE's files).
    reason = errors.write_failure(e)
    if FLAGS.verbose or reason is None:
      raise
    errors.exit_now(errors.refused_write_line('sharedbert', reason), WRITE_FAILED_EXIT_CODE)
  except KeyboardInterrupt:  # A second Ctrl-C: at once, whatever was running.
    errors.exit_now('sharedbert: stopped by a second Ctrl-C; finished work is kept; run the '
                    'same command again to go on', interrupts.INTERRUPTED_EXIT_CODE)


# Flag and config mistakes: one line and exit 2, before main() runs (sharedbert/cli.py).
parse_flags = cli.flags_parser('sharedbert', 'sharedbert.main')


def entry():
  """The console entry point of `python -m sharedbert.main`."""
  app.run(main, flags_parser=parse_flags)


if __name__ == '__main__':
  entry()
