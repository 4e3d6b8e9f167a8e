"""Test setup: 8 fake CPU devices (for meshes) before JAX starts, quiet TensorFlow, and a
persistent compilation cache shared by the test workers.

Most of the suite's time is XLA compiling the same tiny programs (the train step, the
evaluation step, checkpointing's copies) again in every test; the on-disk cache lets each
program compile once per machine. Cache keys include the program and the JAX version, so a
hit returns the same executable a compile would. SHAREDBERT_TEST_JAX_CACHE='' turns it off.

The tests also ask XLA for cheaper CPU code generation: less LLVM optimisation
(--xla_backend_optimization_level=0: the six tiny-preset training tests of test_variants
took 84 s instead of 142 s) and the older element-wise fusion emitter in place of the MLIR
fusion emitters (--xla_cpu_use_fusion_emitters=false: the tiny step compiles in 1.9 s
instead of 3.6 s; the ten longest end-to-end tests took 471 s instead of 624 s on 2 cores).
They change how fast the code compiles and runs, not what it computes (no fast-math either
way); the frozen figures in tests/fixtures still hold to 1e-6. XLA aborts on a flag it does
not know, so the second is kept only if this jaxlib accepts it (a JAX process tries it
first, about 2 s). Set XLA_FLAGS yourself to override both.
"""

import os
import subprocess
import sys
import tempfile

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
os.environ.setdefault('CUDA_VISIBLE_DEVICES', '')


def _accepted_by_xla(flags: str) -> bool:
  probe = subprocess.run(
      [sys.executable, '-c', 'import jax; jax.numpy.zeros(1).block_until_ready()'],
      env=dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS='cpu'), capture_output=True,
      timeout=300)
  return probe.returncode == 0


if 'XLA_FLAGS' not in os.environ:  # Set here, so the test workers and subprocesses inherit it.
  _CHEAP = '--xla_backend_optimization_level=0'
  _OLD_EMITTER = _CHEAP + ' --xla_cpu_use_fusion_emitters=false'
  os.environ['XLA_FLAGS'] = _OLD_EMITTER if _accepted_by_xla(_OLD_EMITTER) else _CHEAP

_CACHE = os.environ.get('SHAREDBERT_TEST_JAX_CACHE', os.path.join(
    tempfile.gettempdir(), f'sharedbert-test-jax-cache-{os.getuid()}'))
if _CACHE:
  # As environment variables, so that the commands the tests run as subprocesses share it.
  os.environ.setdefault('JAX_COMPILATION_CACHE_DIR', _CACHE)
  os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
  os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES', '0')

import jax  # noqa: E402

jax.config.update('jax_num_cpu_devices', 8)
jax.config.update('jax_platforms', 'cpu')
