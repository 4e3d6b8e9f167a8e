"""Multi-process training: how a launch joins its processes, and a real 2-process run.

The 2-process run goes through launch/local_multihost.sh, as a user would run it: two
processes with two fake CPU devices each, on a mesh whose 'fsdp' axis spans the two
processes (so parameters, optimizer state and the batch are split across them) and whose
'tensor' axis lies within each. It must match a 1-process, 1-device run step for step,
dropout included, and leave a checkpoint that restores on one device.
"""

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

import sharedbert
from sharedbert.errors import UserError
from sharedbert.distributed import distributed_args
from test_sharding import assert_params_close, tiny_flags, write_corpus

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCH = os.path.join(REPO, 'launch', 'local_multihost.sh')


# ---------------------------------------------------------------------------------------
# Which launches start jax.distributed, and with what.

def test_a_plain_run_is_one_process():
  assert distributed_args({}) is None
  assert distributed_args({'HOME': '/root', 'PATH': '/usr/bin'}) is None


def test_explicit_coordinator_count_and_rank():
  env = {'JAX_COORDINATOR_ADDRESS': 'localhost:1234', 'JAX_NUM_PROCESSES': '4',
         'JAX_PROCESS_ID': '3', 'SLURM_STEP_NUM_TASKS': '8', 'SLURM_PROCID': '5'}
  assert distributed_args(env) == dict(coordinator_address='localhost:1234', num_processes=4,
                                       process_id=3, cluster_detection_method='deactivate')
  assert distributed_args({**env, 'JAX_NUM_PROCESSES': '1', 'JAX_PROCESS_ID': '0'}) is None
  with pytest.raises(UserError, match='JAX_COORDINATOR_ADDRESS, JAX_PROCESS_ID not set'):
    distributed_args({'JAX_NUM_PROCESSES': '2'})
  with pytest.raises(UserError, match='must be integers'):
    distributed_args({**env, 'JAX_NUM_PROCESSES': 'two'})


def test_slurm_tasks_of_an_srun_step():
  step = {'SLURM_JOB_ID': '77', 'SLURM_NTASKS': '16', 'SLURM_STEP_NUM_TASKS': '16',
          'SLURM_PROCID': '9', 'SLURM_LOCALID': '1', 'SLURM_STEP_NODELIST': 'gpu[01-02]'}
  assert distributed_args(step) == dict(coordinator_address=None, num_processes=16,
                                        process_id=9)
  with_coordinator = {**step, 'JAX_COORDINATOR_ADDRESS': 'gpu01:61234'}
  assert distributed_args(with_coordinator)['coordinator_address'] == 'gpu01:61234'
  # The batch script itself (no srun): SLURM_NTASKS and SLURM_PROCID, but one process.
  batch = {'SLURM_JOB_ID': '77', 'SLURM_NTASKS': '16', 'SLURM_PROCID': '0'}
  assert distributed_args(batch) is None
  assert distributed_args({**step, 'SLURM_STEP_NUM_TASKS': '1'}) is None


def test_tpu_slices_and_switches():
  assert distributed_args({'TPU_WORKER_HOSTNAMES': 'w0,w1,w2,w3'}) == dict(
      coordinator_address=None)
  assert distributed_args({'SHAREDBERT_DISTRIBUTED': '1'}) == dict(coordinator_address=None)
  assert distributed_args({'SHAREDBERT_DISTRIBUTED': '0', 'TPU_WORKER_HOSTNAMES': 'w0,w1'}) is None


# ---------------------------------------------------------------------------------------
# A real 2-process run.

def launch(num_processes, devices_per_process, log_dir, flags):
  # XLA_FLAGS: conftest's cheap CPU code generation (these tiny runs are all compile time).
  env = dict(os.environ, DEVICES_PER_PROCESS=str(devices_per_process), LOG_DIR=str(log_dir),
             PYTHON=sys.executable)
  return subprocess.run(['bash', LAUNCH, str(num_processes), *flags], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=900)


def read_metrics(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]


def test_two_processes_train_like_one(tmp_path):
  corpus = tmp_path / 'corpus.txt'
  write_corpus(corpus)
  two, one = tmp_path / 'two', tmp_path / 'one'
  run = launch(2, 2, tmp_path / 'logs2', tiny_flags(two, corpus, mesh=(1, 2, 2)))
  logs = [(tmp_path / 'logs2' / f'process_{i}.log').read_text() for i in range(2)]
  assert run.returncode == 0, run.stderr[-3000:] + logs[1][-3000:]
  # Process 0 logs and writes; process 1 only trains (and waited for the vocabulary).
  assert 'Process 0 of 2; 2 local devices of 4' in logs[0]
  assert "mesh {'data': 1, 'fsdp': 2, 'tensor': 2}; 4 devices, 2 processes" in logs[0]
  assert '[train] step 3' in logs[0] and '[train]' not in logs[1]
  assert '[train] step 3' in run.stdout  # The script shows process 0's log.
  metrics = read_metrics(two)
  assert [m['step'] for m in metrics if 'loss' in m] == [1, 2, 3]  # Once each: one writer.
  assert os.path.isdir(two / 'checkpoints' / '3')

  # The same run in one process on one device, with the same vocabulary.
  one.mkdir()
  shutil.copy(two / 'vocab.model', one / 'vocab.model')
  ref = launch(1, 1, tmp_path / 'logs1', tiny_flags(one, corpus))
  assert ref.returncode == 0, ref.stderr[-3000:]
  ref_metrics = read_metrics(one)
  for key in ('loss', 'grad_norm', 'eval_loss'):
    got = [m[key] for m in metrics if key in m]
    want = [m[key] for m in ref_metrics if key in m]
    assert len(got) == len(want) > 0, key
    np.testing.assert_allclose(got, want, rtol=2e-5, err_msg=key)

  # The checkpoint written by two processes opens on one device, equal to the 1-process one.
  device = jax.devices()[:1]
  restored = sharedbert.restore(str(two), devices=device)
  assert restored.step == 3 and restored.mesh.devices.size == 1
  assert_params_close(restored.params, sharedbert.restore(str(one), devices=device).params,
                      atol=1e-5)
