r"""Pretraining with `standard` attention; see sharedbert/config/__init__.py for the recipe.

Presets: `:tiny` (2-core CPU, minutes, embedded demo corpus), `:cpu30` (2-core CPU, 30 min),
`:small` (one GPU), default BERT-base.
  python -m sharedbert.main --config=configs/standard_base.py:tiny --workdir=/tmp/standard_tiny
"""

from sharedbert import config as sb_config


def get_config(arg=None):
  return sb_config.pretrain_config('standard', arg)
