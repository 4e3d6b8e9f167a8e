r"""Pretraining with `masa` attention (matrix atom sharing; Zhussip et al., arXiv 2508.04581).

Every projection type in model.masa_projections (default q, k, v and o) is a combination of
model.masa_atoms atoms shared by all layers. The default 0 means ceil(L/3) atoms per type
(BERT-base: 4; it follows --config.model.num_layers), the paper's 66.7% reduction of the
attention block. Presets: `:tiny` (2-core CPU, minutes, embedded demo corpus; 1 atom per
type), `:small` (2), default BERT-base (4).
  python -m sharedbert.main --config=configs/masa_base.py:tiny --workdir=/tmp/masa_tiny
"""

from sharedbert import config as sb_config


def get_config(arg=None):
  config = sb_config.pretrain_config('masa', arg)
  config.model.masa_atoms = 0  # ceil(num_layers / 3)
  config.model.masa_projections = 'qkvo'
  config.model.masa_coefficient_init = 'normal'  # The coefficients' start (MasaAttention).
  return config
