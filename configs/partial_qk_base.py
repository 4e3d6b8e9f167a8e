r"""Pretraining with `partial_qk` attention (Yang et al., NeurIPS ENLSP 2024, PMLR 262).

Per head, the first floor(rho*H) columns of Q and K are shared, rho =
model.qk_shared_fraction (0: standard, 1: symmetric; default 0.5). Presets: `:tiny` (2-core
CPU, minutes, embedded demo corpus), `:small`, default BERT-base.
  python -m sharedbert.main --config=configs/partial_qk_base.py:tiny --workdir=/tmp/pqk_tiny \
      --config.model.qk_shared_fraction=0.75
"""

from sharedbert import config as sb_config


def get_config(arg=None):
  config = sb_config.pretrain_config('partial_qk', arg)
  config.model.qk_shared_fraction = 0.5
  return config
