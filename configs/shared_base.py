r"""Pretraining with `shared` attention; see sharedbert/config/__init__.py for the recipe.

Presets: `:tiny` (2-core CPU, minutes, embedded demo corpus), `:cpu30` (2-core CPU, 30 min),
`:small` (one GPU), default BERT-base.
  python -m sharedbert.main --config=configs/shared_base.py:tiny --workdir=/tmp/shared_tiny
"""

from sharedbert import config as sb_config


def get_config(arg=None):
  return sb_config.pretrain_config('shared', arg)
