"""The encoder (bert.py) and its attention variants (attention.py; MASA's in masa.py).

masa.py registers itself in attention.VARIANTS; importing it here makes every variant
known whichever module of the package is imported first."""

from sharedbert.models import masa  # noqa: F401  (registers 'masa')
