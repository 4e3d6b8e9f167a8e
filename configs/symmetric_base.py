r"""Pretraining with `symmetric` attention (K = Q; Courtois et al., arXiv 2406.06366).

The recipe is sharedbert/config/__init__.py's. Presets: `:tiny` (2-core CPU, minutes, embedded demo
corpus), `:small`, default BERT-base.
  python -m sharedbert.main --config=configs/symmetric_base.py:tiny --workdir=/tmp/symmetric_tiny
"""

from sharedbert import config as sb_config


def get_config(arg=None):
  return sb_config.pretrain_config('symmetric', arg)
