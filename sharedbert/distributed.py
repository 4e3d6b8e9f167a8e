"""Joining the other processes of a multi-process launch (a TPU pod, a GPU cluster under
SLURM, launch/local_multihost.sh): what `jax.distributed.initialize` is given, read from
the environment, and the call itself. A single process does nothing.
"""

from __future__ import annotations

import glob
import importlib.util
import os

from absl import logging
import jax

from sharedbert.errors import UserError


def distributed_args(environ) -> dict | None:
  """The arguments of `jax.distributed.initialize` for this launch, or None for one process.

  In order: SHAREDBERT_DISTRIBUTED=0 turns it off; JAX_COORDINATOR_ADDRESS with
  JAX_NUM_PROCESSES and JAX_PROCESS_ID set everything explicitly (launch/local_multihost.sh,
  or any launcher); inside an srun step of several tasks the count and rank come from
  SLURM (and the coordinator from JAX_COORDINATOR_ADDRESS when the sbatch script sets it);
  on a Cloud TPU VM (libtpu and /dev/accel* or /dev/vfio present), on GKE TPU slices
  (TPU_WORKER_HOSTNAMES), or with SHAREDBERT_DISTRIBUTED=1, JAX detects the rest itself.

  Args:
    environ: the environment (os.environ).
  Returns:
    jax.distributed.initialize's keyword arguments (only coordinator_address, maybe None,
    where JAX detects the rest), or None.
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


def initialize():
  """Joins the other processes when launched on a pod or a cluster (see launch/).

  Only process 0 logs at INFO; the others keep warnings and errors.

  Returns:
    None.
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
