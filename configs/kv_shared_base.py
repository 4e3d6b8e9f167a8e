r"""Pretraining with `kv_shared` attention: K = V = xW_kv+b_kv, Q = xW_q+b_q (keys and values
share one projection; Kayyam et al. 2026, arXiv 2606.04032, "Q-K=V").

The recipe is sharedbert/config/__init__.py's. Presets: `:tiny` (2-core CPU, minutes, embedded demo
corpus), `:small`, default BERT-base.
  python -m sharedbert.main --config=configs/kv_shared_base.py:tiny --workdir=/tmp/kv_shared_tiny
"""

from sharedbert import config as sb_config


def get_config(arg=None):
  return sb_config.pretrain_config('kv_shared', arg)
