r"""Pretraining with `shared_qk` attention: Q = S diag(d_q), K = S diag(d_k) from one
projection S = xW_s + b_s, V its own projection: `shared` with V untied, the factorial's cell
that separates score symmetry, self-favouring and tying V (docs/variants.md).

The recipe is sharedbert/config/__init__.py's. Presets: `:tiny` (2-core CPU, minutes, embedded demo
corpus), `:small`, default BERT-base.
  python -m sharedbert.main --config=configs/shared_qk_base.py:tiny --workdir=/tmp/shared_qk_tiny
"""

from sharedbert import config as sb_config


def get_config(arg=None):
  config = sb_config.pretrain_config('shared_qk', arg)
  # d_q and d_k start as shared's (SharedQKAttention.settings).
  config.model.diag_init = 1.0
  config.model.diag_init_scheme = 'signs'
  return config
