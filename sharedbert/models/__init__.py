"""The encoder (bert.py) and its attention variants (attention.py; partial_qk's in
partial_qk.py, MASA's in masa.py).

partial_qk.py and masa.py register themselves in attention.VARIANTS; importing them here
makes every variant known whichever module of the package is imported first."""

from sharedbert.models import partial_qk  # noqa: F401  (registers 'partial_qk')
from sharedbert.models import masa  # noqa: F401  (registers 'masa')
