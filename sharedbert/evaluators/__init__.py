"""What a fine-tuned model is measured on besides its dev set (common.py: evaluators by
name): robustness to embedding noise, cross-domain transfer, and the encoder probes, a
linear probe (linear_probe.py) and zero-shot STS-B (sts.py).

The package's evaluators register themselves in common.EVALUATORS as their modules load;
importing them here makes them known whichever module of the package is imported first."""

from sharedbert.evaluators import crossdomain  # noqa: F401  (registers 'crossdomain')
from sharedbert.evaluators import robustness  # noqa: F401  (registers 'robustness')
from sharedbert.evaluators import linear_probe  # noqa: F401  (registers 'linear_probe')
from sharedbert.evaluators import sts  # noqa: F401  (registers 'sts')
