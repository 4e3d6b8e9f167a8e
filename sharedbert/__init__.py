"""sharedbert: BERT encoders with shared query-key-value attention weights (JAX/Flax).

Run `python -m sharedbert.main --config=configs/shared_base.py:tiny --workdir=DIR`; from a
notebook, `import sharedbert.train` for `sharedbert.train.train_and_evaluate(config,
workdir)`, and `import sharedbert.restore` for `sharedbert.restore(workdir)`, which opens a
run's checkpoint on whatever devices you have. `import sharedbert` alone loads neither JAX
nor TensorFlow.
"""

import os

__version__ = '0.1.0'

# TensorFlow serves only the input pipelines (tf.data, tfds). On CPUs where it turns its
# oneDNN kernels on, it prints a notice about "round-off errors" to stderr at import, whatever
# TF_CPP_MIN_LOG_LEVEL says, into every command's error output; its kernels are not needed.
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '0')
# Its C++ INFO lines (CPU features, absl's start-up notice) would come before every
# command's output and before a one-line error; warnings and errors still show.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')


def __getattr__(name):
  # The submodules load JAX and TensorFlow, so `import sharedbert` does not import them;
  # a notebook that forgot the import line gets told which one it needs.
  if name in ('restore', 'train'):
    raise AttributeError(f'sharedbert.{name} is not imported yet: add `import '
                         f'sharedbert.{name}` (it loads JAX)')
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
