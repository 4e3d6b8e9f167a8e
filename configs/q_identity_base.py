r"""Pretraining with `q_identity` attention: Q = x split into heads (no query parameters),
K and V standard (Karbevski 2025, arXiv 2510.23912, "W_Q = I").

The recipe is sharedbert/config/__init__.py's. Presets: `:tiny` (2-core CPU, minutes, embedded demo
corpus), `:small`, default BERT-base.
  python -m sharedbert.main --config=configs/q_identity_base.py:tiny --workdir=/tmp/q_identity_tiny
"""

from sharedbert import config as sb_config


def get_config(arg=None):
  return sb_config.pretrain_config('q_identity', arg)
