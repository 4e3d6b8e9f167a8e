"""The Hugging Face peer of `sharedbert bench`: times `BertForMaskedLM` training steps.

Runs in its own process under a Python that has torch and transformers (no JAX, no
sharedbert imports), so that the benchmark's JAX and PyTorch sides never run at the same
time and may live in different virtual environments:

  HF_PYTHON sharedbert/lab/bench/hf_peer.py SPEC.json   ->  one JSON line of results on stdout

SPEC.json holds the model size, the optimizer, the timing settings and the path of an .npz
with the batch (the same arrays the JAX side trains on). The model is used the standard
way: labels are the original token ids at the masked positions and -100 elsewhere, so the
vocabulary projection runs on every position (B*T rows), as it does for any user of
`BertForMaskedLM`. The optimizer matches sharedbert's: global-norm clipping, then torch's
AdamW with the same betas, eps and weight decay (none on biases and LayerNorm), under a
linear warmup schedule.
"""

import json
import os
import resource
import statistics
import sys
import time

import numpy as np


def _rss_bytes() -> int:
  with open('/proc/self/statm') as f:
    return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE')


def run(spec: dict) -> dict:
  """Builds Hugging Face's model and optimizer from `spec` and times its steps. One
  function on purpose: torch and transformers are imported here only (this process), and
  the steps read top to bottom as the peer's whole recipe."""
  import torch
  import transformers

  threads = int(spec.get('threads') or os.cpu_count())
  torch.set_num_threads(threads)
  torch.manual_seed(0)
  m = spec['model']
  config = transformers.BertConfig(
      vocab_size=m['vocab_size'], hidden_size=m['hidden_size'],
      num_hidden_layers=m['num_layers'], num_attention_heads=m['num_heads'],
      intermediate_size=m['mlp_dim'], hidden_act='gelu',
      hidden_dropout_prob=m['dropout_rate'],
      attention_probs_dropout_prob=m['attention_dropout_rate'],
      max_position_embeddings=m['max_position_embeddings'],
      type_vocab_size=m['type_vocab_size'], layer_norm_eps=m['layer_norm_eps'])
  device = torch.device(spec.get('device', 'cpu'))
  rss_before = _rss_bytes()
  model = transformers.BertForMaskedLM(config).to(device)
  model.train()

  arrays = np.load(spec['batch_npz'])
  ids = torch.from_numpy(arrays['input_ids'].astype(np.int64)).to(device)
  labels = np.full(arrays['input_ids'].shape, -100, np.int64)
  rows, cols = np.nonzero(arrays['masked_weights'] > 0)
  labels[rows, arrays['masked_positions'][rows, cols]] = arrays['masked_ids'][rows, cols]
  batch = dict(input_ids=ids,
               token_type_ids=torch.from_numpy(arrays['segment_ids'].astype(np.int64)).to(device),
               attention_mask=torch.from_numpy(arrays['input_mask'].astype(np.int64)).to(device),
               labels=torch.from_numpy(labels).to(device))

  o = spec['optim']
  no_decay = [p for n, p in model.named_parameters() if n.endswith('bias') or 'LayerNorm' in n]
  decay = [p for n, p in model.named_parameters()
           if not (n.endswith('bias') or 'LayerNorm' in n)]
  optimizer = torch.optim.AdamW(
      [{'params': decay, 'weight_decay': o['weight_decay']},
       {'params': no_decay, 'weight_decay': 0.0}],
      lr=o['lr'], betas=(o['b1'], o['b2']), eps=o['eps'])
  warmup = max(int(o['warmup_steps']), 1)
  scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))

  def step():
    optimizer.zero_grad(set_to_none=True)
    loss = model(**batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), o['grad_clip_norm'])
    optimizer.step()
    scheduler.step()
    return loss

  def sync():
    if device.type == 'cuda':
      torch.cuda.synchronize()

  t0 = time.perf_counter()
  loss = step()
  sync()
  first_step = time.perf_counter() - t0
  for _ in range(max(spec['warmup'] - 1, 0)):
    step()
  sync()
  times = []
  for _ in range(spec['steps']):
    t0 = time.perf_counter()
    loss = step()
    sync()
    times.append(time.perf_counter() - t0)
  peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
  return {
      'step_times_s': times,
      'step_time_s': statistics.median(times),
      'first_step_s': first_step,
      'final_loss': float(loss.detach()),
      'peak_rss_bytes': peak_rss,
      'rss_before_model_bytes': rss_before,
      'torch': torch.__version__,
      'transformers': transformers.__version__,
      'threads': torch.get_num_threads(),
      'attn_implementation': getattr(model.config, '_attn_implementation', None),
      'parameters': sum(p.numel() for p in model.parameters()),
  }


def main(argv):
  if len(argv) != 2:
    sys.exit(f'usage: {argv[0]} SPEC.json')
  with open(argv[1]) as f:
    spec = json.load(f)
  print(json.dumps(run(spec)))


if __name__ == '__main__':
  main(sys.argv)
