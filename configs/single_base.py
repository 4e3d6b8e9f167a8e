r"""Pretraining with `single` attention: Q = K = V = xW+b, one projection and no diagonals
(Kayyam et al. 2026, arXiv 2606.04032, "Q=K=V"; `shared` minus its diagonals).

The recipe is sharedbert/config/__init__.py's. Presets: `:tiny` (2-core CPU, minutes, embedded demo
corpus), `:small`, default BERT-base.
  python -m sharedbert.main --config=configs/single_base.py:tiny --workdir=/tmp/single_tiny
"""

from sharedbert import config as sb_config


def get_config(arg=None):
  return sb_config.pretrain_config('single', arg)
