r"""GLUE fine-tuning of a Hugging Face BERT checkpoint with transformers and PyTorch: the
reference that sharedbert's GLUE path is checked against (docs/finetuning.md, "Parity with
Hugging Face"). Not part of the package: it needs torch and transformers, which sharedbert
does not.

  python tools/hf_glue_reference.py --model_dir=DATA/pretrained/all-MiniLM-L6-v2 \
      --glue_dir=DATA/glue --task=mrpc --seeds=0,1,2 --out=hf_mrpc.json \
      [--seq_len=128 --max_train_examples=0 --epochs=3 --batch_size=32 --lr=5e-5 ...]

It matches configs/glue.py's recipe and data, as far as two frameworks can:
  * data: glue_data TSVs read by header name as sharedbert.data.glue does (CoLA train/dev
    have no header), the same fixed training subset (`max_train_examples`: the sorted first
    N of numpy.random.default_rng(0).permutation), dev sets whole, the checkpoint's own
    WordPiece tokenizer, pairs truncated longest-first to seq_len;
  * model: `BertForSequenceClassification`, its pooler from the checkpoint, dropout 0.1
    and a fresh N(0, initializer_range) classifier with zero bias (ours: the same
    distribution, drawn by JAX);
  * optimizer: AdamW (b1 0.9, b2 0.999, eps, weight decay on every weight but biases and
    LayerNorm, as sharedbert.optim's mask), global-norm clipping, linear warmup over
    warmup_fraction of the steps then linear decay to 0; cross-entropy, MSE for STS-B;
  * score: the dev set at the end of the last epoch, the mean of the task's metrics
    (MRPC (F1 + accuracy) / 2, STS-B (Pearson + Spearman) / 2, CoLA MCC, SST-2 accuracy).
Not matched: the random streams (initialisation, dropout, batch order), so single seeds
differ; the comparison is between seed means, against the seed spread.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np

# name: (folder, text columns, label column, metrics, regression)
TASKS = {
    'cola': ('CoLA', ['sentence'], 'label', ['mcc'], False),
    'sst2': ('SST-2', ['sentence'], 'label', ['accuracy'], False),
    'mrpc': ('MRPC', ['#1 String', '#2 String'], 'Quality', ['f1', 'accuracy'], False),
    'stsb': ('STS-B', ['sentence1', 'sentence2'], 'score', ['pearson', 'spearman'], True),
}


def read_split(glue_dir: str, task: str, split: str):
  """[(text_a, text_b or None, label)] in file order. TSV, not CSV: quotes are text."""
  folder, text_cols, label_col, _, regression = TASKS[task]
  with open(os.path.join(glue_dir, folder, f'{split}.tsv'), encoding='utf-8-sig') as f:
    lines = [l.rstrip('\n').rstrip('\r') for l in f]
  header = lines[0].split('\t')
  if all(c in header for c in text_cols + [label_col]):
    text_idx, label_idx, first = [header.index(c) for c in text_cols], header.index(label_col), 1
  elif task == 'cola':
    text_idx, label_idx, first = [3], 1, 0
  else:
    raise SystemExit(f'{task} {split}: unexpected header {header}')
  rows = []
  for line in lines[first:]:
    if not line:
      continue
    cols = line.split('\t')
    label = float(cols[label_idx]) if regression else int(cols[label_idx])
    texts = [cols[i] for i in text_idx]
    rows.append((texts[0], texts[1] if len(texts) > 1 else None, label))
  return rows


def subset(rows, max_items: int):
  """sharedbert.tasks.engine.subset: a fixed random subset, kept in file order."""
  if not max_items or len(rows) <= max_items:
    return rows
  keep = np.sort(np.random.default_rng(0).permutation(len(rows))[:max_items])
  return [rows[i] for i in keep]


# ---- metrics, in NumPy (no scipy or sklearn needed) ----

def _ranks(x):
  order = np.argsort(x, kind='mergesort')
  ranks = np.empty(len(x))
  sorted_x = np.asarray(x)[order]
  i = 0
  while i < len(x):  # Ties share their mean rank.
    j = i
    while j + 1 < len(x) and sorted_x[j + 1] == sorted_x[i]:
      j += 1
    ranks[order[i:j + 1]] = (i + j) / 2.0
    i = j + 1
  return ranks


def metrics(task: str, predictions, labels) -> dict:
  p, l = np.asarray(predictions), np.asarray(labels)
  out = {}
  for name in TASKS[task][3]:
    if name == 'accuracy':
      out[name] = float(np.mean(p == l))
    elif name == 'f1':
      tp = np.sum((p == 1) & (l == 1))
      out[name] = float(2 * tp / max(np.sum(p == 1) + np.sum(l == 1), 1))
    elif name == 'mcc':
      tp, tn = np.sum((p == 1) & (l == 1)), np.sum((p == 0) & (l == 0))
      fp, fn = np.sum((p == 1) & (l == 0)), np.sum((p == 0) & (l == 1))
      den = math.sqrt(float((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)))
      out[name] = float((tp * tn - fp * fn) / den) if den else 0.0
    elif name == 'pearson':
      out[name] = float(np.corrcoef(p, l)[0, 1])
    elif name == 'spearman':
      out[name] = float(np.corrcoef(_ranks(p), _ranks(l))[0, 1])
  return out


def run_seed(args, task: str, seed: int, train, dev) -> dict:
  import torch
  from transformers import AutoTokenizer, BertForSequenceClassification
  from transformers import get_linear_schedule_with_warmup
  torch.manual_seed(seed)
  regression = TASKS[task][4]
  tok = AutoTokenizer.from_pretrained(args.model_dir)
  model = BertForSequenceClassification.from_pretrained(
      args.model_dir, num_labels=1 if regression else 2)
  std = model.config.initializer_range
  torch.nn.init.normal_(model.classifier.weight, std=std)  # Seeded: this run's draw.
  torch.nn.init.zeros_(model.classifier.bias)

  def encode(rows):
    a = [r[0] for r in rows]
    b = [r[1] for r in rows] if rows[0][1] is not None else None
    enc = tok(a, b, truncation='longest_first', max_length=args.seq_len, padding=True,
              return_tensors='pt')
    dtype = torch.float32 if regression else torch.long
    return enc, torch.tensor([r[2] for r in rows], dtype=dtype)

  no_decay = [p for n, p in model.named_parameters() if n.endswith('bias') or 'LayerNorm' in n]
  decay = [p for n, p in model.named_parameters()
           if not (n.endswith('bias') or 'LayerNorm' in n)]
  opt = torch.optim.AdamW([{'params': decay, 'weight_decay': args.weight_decay},
                           {'params': no_decay, 'weight_decay': 0.0}],
                          lr=args.lr, betas=(0.9, 0.999), eps=args.eps)
  steps_per_epoch = -(-len(train) // args.batch_size)
  total = steps_per_epoch * args.epochs
  sched = get_linear_schedule_with_warmup(opt, int(round(args.warmup_fraction * total)), total)
  rng = np.random.default_rng(seed)
  t0 = time.time()
  for epoch in range(args.epochs):
    model.train()
    order = rng.permutation(len(train))
    losses = []
    for i in range(steps_per_epoch):
      rows = [train[j] for j in order[i * args.batch_size:(i + 1) * args.batch_size]]
      enc, labels = encode(rows)
      logits = model(**enc).logits
      if regression:
        loss = torch.mean((logits[:, 0] - labels) ** 2)
      else:
        loss = torch.nn.functional.cross_entropy(logits, labels)
      opt.zero_grad()
      loss.backward()
      torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
      opt.step()
      sched.step()
      losses.append(loss.item())
    print(f'{task} seed {seed} epoch {epoch}: train loss {np.mean(losses):.4f} '
          f'({time.time() - t0:.0f}s)', flush=True)
  model.eval()
  preds = []
  with torch.no_grad():
    for i in range(0, len(dev), 128):
      enc, _ = encode(dev[i:i + 128])
      logits = model(**enc).logits
      preds.append(logits[:, 0].numpy() if regression else logits.argmax(-1).numpy())
  m = metrics(task, np.concatenate(preds), [r[2] for r in dev])
  return {'seed': seed, 'metrics': m, 'score': float(np.mean(list(m.values()))),
          'wall_s': round(time.time() - t0, 1)}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--model_dir', required=True, help='a Hugging Face BERT folder')
  parser.add_argument('--glue_dir', required=True, help='a glue_data folder (MRPC/, ...)')
  parser.add_argument('--task', required=True, choices=sorted(TASKS))
  parser.add_argument('--seeds', default='0,1,2')
  parser.add_argument('--out', required=True, help='results JSON (rewritten per seed)')
  parser.add_argument('--seq_len', type=int, default=128)
  parser.add_argument('--max_train_examples', type=int, default=0)
  parser.add_argument('--epochs', type=int, default=3)
  parser.add_argument('--batch_size', type=int, default=32)
  parser.add_argument('--lr', type=float, default=5e-5)
  parser.add_argument('--warmup_fraction', type=float, default=0.1)
  parser.add_argument('--weight_decay', type=float, default=0.01)
  parser.add_argument('--eps', type=float, default=1e-6)
  parser.add_argument('--clip', type=float, default=1.0)
  parser.add_argument('--threads', type=int, default=1, help='torch CPU threads')
  args = parser.parse_args()
  import torch
  torch.set_num_threads(args.threads)
  train = subset(read_split(args.glue_dir, args.task, 'train'), args.max_train_examples)
  dev = read_split(args.glue_dir, args.task, 'dev')
  done = {}
  if os.path.isfile(args.out):  # Resume: seeds already scored under the same settings.
    old = json.load(open(args.out))
    same = lambda d: {k: v for k, v in d.items() if k not in ('seeds', 'threads')}
    if same(old.get('settings', {})) == same(vars(args)):
      done = {r['seed']: r for r in old['seeds']}
  for seed in [int(s) for s in args.seeds.split(',')]:
    if seed not in done:
      done[seed] = run_seed(args, args.task, seed, train, dev)
    scores = [r['score'] for r in done.values()]
    result = {'task': args.task, 'settings': vars(args), 'num_train': len(train),
              'num_dev': len(dev), 'seeds': sorted(done.values(), key=lambda r: r['seed']),
              'mean': float(np.mean(scores)),
              'std': float(np.std(scores, ddof=1)) if len(scores) > 1 else 0.0}
    tmp = args.out + '.tmp'
    with open(tmp, 'w') as f:
      json.dump(result, f, indent=1)
    os.replace(tmp, args.out)
    print(f'{args.task} seed {seed}: score {done[seed]["score"]:.4f} {done[seed]["metrics"]}',
          flush=True)


if __name__ == '__main__':
  main()
