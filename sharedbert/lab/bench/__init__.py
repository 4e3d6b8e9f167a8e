"""Benchmarks: step time, MFU, memory and the input pipeline (run), the Hugging Face
peer (hf_peer)."""
