r"""Pretraining with `pairwise` attention (score_h = Q_h P_h Q_h^T; Courtois et al., arXiv
2406.06366).

The recipe is sharedbert/config/__init__.py's; P_h is weight-decayed like the other weight matrices.
Presets: `:tiny` (2-core CPU, minutes, embedded demo corpus), `:cpu30` (2-core CPU, 30 min),
`:small` (one GPU), default BERT-base.
  python -m sharedbert.main --config=configs/pairwise_base.py:tiny --workdir=/tmp/pairwise_tiny
"""

from sharedbert import config as sb_config


def get_config(arg=None):
  config = sb_config.pretrain_config('pairwise', arg)
  # The std of each head's P_h at init (PairwiseAttention.settings; Courtois et al.: 1).
  config.model.pairwise_init_std = 1.0
  return config
