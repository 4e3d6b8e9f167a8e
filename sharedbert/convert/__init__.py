"""Checkpoints in and out: Hugging Face (hf, hf_layout) and standard -> shared, kv_shared
or masa (shared)."""
