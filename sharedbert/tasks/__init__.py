"""Fine-tuned tasks; engine.py is what they share (fit, predict, padding)."""
