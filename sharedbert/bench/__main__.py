"""`python -m sharedbert.bench`: the benchmarks (sharedbert/bench/run.py)."""

from sharedbert.bench.run import entry

entry()
