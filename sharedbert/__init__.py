"""sharedbert: BERT encoders with shared query-key-value attention weights (JAX/Flax).

Run `python -m sharedbert.main --config=configs/shared_base.py:tiny --workdir=DIR`; from a
notebook, `sharedbert.train.train_and_evaluate(config, workdir)`, and
`sharedbert.restore(workdir)` to open a run's checkpoint on whatever devices you have.
"""

__version__ = '0.1.0'


def __getattr__(name):
  # Imported on first use, so that `import sharedbert` stays light (no JAX, no TensorFlow).
  if name == 'restore':
    from sharedbert.restore import restore
    globals()['restore'] = restore
    return restore
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
