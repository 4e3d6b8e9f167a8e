"""sharedbert: BERT encoders with shared query-key-value attention weights (JAX/Flax).

Run `python -m sharedbert.main --config=configs/shared_base.py:tiny --workdir=DIR`; from a
notebook, `sharedbert.train.train_and_evaluate(config, workdir)`.
"""

__version__ = '0.1.0'
