"""Test setup: 8 fake CPU devices (for meshes) before JAX starts, quiet TensorFlow, and a
persistent compilation cache shared by the test workers.

Most of the suite's time is XLA compiling the same tiny programs (the train step, the
evaluation step, checkpointing's copies) again in every test; the on-disk cache lets each
program compile once per machine. Cache keys include the program and the JAX version, so a
hit returns the same executable a compile would. SHAREDBERT_TEST_JAX_CACHE='' turns it off.

The tests also ask LLVM for less optimisation of the CPU code (XLA's
--xla_backend_optimization_level=0): the six tiny-preset training tests of test_variants
took 84 s instead of 142 s with it. It changes how fast the code runs, not what it computes
(no fast-math either way); the frozen figures in tests/fixtures still hold to 1e-6. Set
XLA_FLAGS yourself to override it.
"""

import os
import tempfile

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
os.environ.setdefault('CUDA_VISIBLE_DEVICES', '')
os.environ.setdefault('XLA_FLAGS', '--xla_backend_optimization_level=0')

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
