"""Test setup: 8 fake CPU devices (for meshes) before JAX starts, quiet TensorFlow."""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
os.environ.setdefault('CUDA_VISIBLE_DEVICES', '')

import jax  # noqa: E402

jax.config.update('jax_num_cpu_devices', 8)
jax.config.update('jax_platforms', 'cpu')
