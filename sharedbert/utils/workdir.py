"""What every run (pretraining, fine-tuning, the probes) does to its workdir: the checks
before anything is written, the resolved config, and the hosts' meeting points."""

import os

import jax
from jax.experimental import multihost_utils

from sharedbert.utils import jsonio
from sharedbert.config import validation

check = validation.workdir  # A --workdir that is a file (or under one) cannot hold a run.


def write_config(config, workdir: str) -> None:
  """WORKDIR/config.json: the resolved config (atomic: a kill never leaves half a file).

  Args:
    config: the run's config.
    workdir: the run's workdir.
  Returns:
    None.
  """
  jsonio.write_text(os.path.join(workdir, 'config.json'),
                    config.to_json_best_effort(indent=2, sort_keys=True) + '\n')


def sync(name: str) -> None:
  """Waits for every host at the point `name` (nothing on one host).

  Args:
    name: the barrier's name, the same on every host.
  Returns:
    None.
  """
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)
