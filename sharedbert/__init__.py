"""sharedbert: BERT encoders with shared query-key-value attention weights (JAX/Flax).

Run `python -m sharedbert.main --config=configs/shared_base.py:tiny --workdir=DIR`. From a
notebook, `import sharedbert` and then:

    run = sharedbert.restore(workdir)          # open a run's checkpoint on your devices
    sharedbert.train_and_evaluate(config, workdir)

`import sharedbert` alone loads neither JAX nor TensorFlow: these names load their modules
on first use (PEP 562), `restore` from sharedbert.runs (no TensorFlow for a local run) and
`train_and_evaluate` from sharedbert.train.
"""

import importlib
import os

__version__ = '0.1.0'

# TensorFlow serves only the input pipelines (tf.data, tfds). On CPUs where it turns its
# oneDNN kernels on, it prints a notice about "round-off errors" to stderr at import, whatever
# TF_CPP_MIN_LOG_LEVEL says, into every command's error output; its kernels are not needed.
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '0')
# Its C++ INFO lines (CPU features, absl's start-up notice) would come before every
# command's output and before a one-line error; warnings and errors still show.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')

# Public name -> (module, attribute), loaded when first asked for.
_LAZY = {
    'restore': ('sharedbert.runs', 'restore'),
    'Restored': ('sharedbert.runs', 'Restored'),
    'train_and_evaluate': ('sharedbert.train', 'train_and_evaluate'),
}


def __getattr__(name):
  if name in _LAZY:
    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # Later lookups skip this function.
    return value
  if name == 'train':  # The module, for `sharedbert.train.train_and_evaluate`.
    return importlib.import_module('sharedbert.train')
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
  return sorted(list(globals()) + list(_LAZY))
