"""Experiments built on the core: the controlled study, the attention probes, the recipe
ablation."""
