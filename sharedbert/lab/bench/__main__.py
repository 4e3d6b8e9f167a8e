"""`python -m sharedbert.lab.bench`: the benchmarks (sharedbert/lab/bench/run.py)."""

from sharedbert.lab.bench.run import entry


entry()
