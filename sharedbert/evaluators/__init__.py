"""What a fine-tuned model is measured on besides its dev set: robustness to embedding
noise, cross-domain transfer."""
