"""`python -m sharedbert.probe --workdir=W [--config=configs/probe.py:smoke]`: the attention
probes (sharedbert/experiments/probe.py, configs/probe.py)."""

from sharedbert.experiments.probe import cli_main

if __name__ == '__main__':
  cli_main()
