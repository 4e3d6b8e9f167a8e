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
differ; the comparison is between seed means, against the seed spread. Two differences are
transformers' defaults unless asked otherwise: the schedule (`--schedule=hf`: the first
step's rate is 0, the last step's lr/(total-warmup); sharedbert's first step learns and
its last is 0) and the classifier's initialisation (`--classifier_init=normal`; sharedbert
draws BERT's normal cut at ±2 std). `--schedule=sharedbert
--classifier_init=truncated_normal` takes sharedbert's.

Matched mode (issue 43): `--matched=DIR` repeats, step for step, the run that
tools/glue_matched.py made in DIR: the model is DIR/init (sharedbert's untrained
classifier, exported), the batches are its epochs' orders, the learning rate of each step
is the one it applied, and dropout is the recorded run's (0). It checks that the Hugging Face
tokenizer gives sharedbert's token ids, trains, and writes both runs' per-step losses to
--out with the first step where they part by more than --tolerance.

  python tools/hf_glue_reference.py --matched=DIR --model_dir=... --glue_dir=... \
      --task=sst2 --out=DIR/hf.json
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


def tokenize(tok, rows, seq_len: int):
  """A batch of (text_a, text_b or None, label) rows as the model's inputs: pairs cut
  longest-first to seq_len, padded to the longest row."""
  a = [r[0] for r in rows]
  b = [r[1] for r in rows] if rows[0][1] is not None else None
  return tok(a, b, truncation='longest_first', max_length=seq_len, padding=True,
             return_tensors='pt')


def adamw(model, args, lr: float):
  """torch's AdamW over `model` with sharedbert.optim's decay mask: no weight decay on
  biases and LayerNorm."""
  import torch
  plain = lambda n: n.endswith('bias') or 'LayerNorm' in n
  return torch.optim.AdamW(
      [{'params': [p for n, p in model.named_parameters() if not plain(n)],
        'weight_decay': args.weight_decay},
       {'params': [p for n, p in model.named_parameters() if plain(n)], 'weight_decay': 0.0}],
      lr=lr, betas=(0.9, 0.999), eps=args.eps)


def sharedbert_lr_factor(step: int, warmup: int, total: int) -> float:
  """sharedbert.optim's rate at `step` over lr: (s+1)/W while warming up, then linear to 0
  at the last step, total - 1 (tests/test_glue_matched_tool.py checks it against ours)."""
  if step < warmup:
    factor = (step + 1) / max(warmup, 1)
  else:
    factor = (total - 1 - step) / max(total - 1 - warmup, 1)
  return min(1.0, max(0.0, factor))


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
  if args.classifier_init == 'truncated_normal':  # sharedbert's (BERT's): cut at ±2 std.
    torch.nn.init.trunc_normal_(model.classifier.weight, std=std, a=-2 * std, b=2 * std)
  else:  # BertForSequenceClassification's own.
    torch.nn.init.normal_(model.classifier.weight, std=std)  # Seeded: this run's draw.
  torch.nn.init.zeros_(model.classifier.bias)

  def encode(rows):
    dtype = torch.float32 if regression else torch.long
    return (tokenize(tok, rows, args.seq_len),
            torch.tensor([r[2] for r in rows], dtype=dtype))

  opt = adamw(model, args, args.lr)
  steps_per_epoch = -(-len(train) // args.batch_size)
  total = steps_per_epoch * args.epochs
  warmup = int(round(args.warmup_fraction * total))
  if args.schedule == 'sharedbert':
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: sharedbert_lr_factor(s, warmup, total))
  else:  # transformers': lr·s/W (the first step at 0), then lr·(total-s)/(total-W).
    sched = get_linear_schedule_with_warmup(opt, warmup, total)
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


def _ids(enc, i):
  """Row i's token ids without padding."""
  mask = enc['attention_mask'][i].bool()
  return enc['input_ids'][i][mask].tolist()


def run_matched(args, meta: dict, train, dev) -> dict:
  """tools/glue_matched.py's run (`meta`: its sharedbert.json), repeated in PyTorch step
  for step (see the docstring)."""
  import torch
  from transformers import AutoTokenizer, BertForSequenceClassification
  ref = np.load(os.path.join(args.matched, 'sharedbert.npz'))
  if meta['task'] != args.task or meta['num_train'] != len(train):
    raise SystemExit(f'{args.matched} holds {meta["task"]} with {meta["num_train"]} rows, '
                     f'not {args.task} with {len(train)}: pass its --max_train_examples')
  init = os.path.join(args.matched, 'init')
  tok = AutoTokenizer.from_pretrained(init)
  dropout = float(meta['dropout'])  # The recorded run's (0: the matched comparison).
  model = BertForSequenceClassification.from_pretrained(
      init, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)

  encode = lambda rows: tokenize(tok, rows, meta['seq_len'])

  # 1. The same token ids as sharedbert's, row by row.
  differ = {}
  for split, rows, ids, lengths in (('train', train, ref['train_ids'], ref['train_lengths']),
                                    ('dev', dev, ref['dev_ids'], ref['dev_lengths'])):
    enc = encode(rows)
    bad = [i for i in range(len(rows)) if _ids(enc, i) != ids[i, :lengths[i]].tolist()]
    differ[split] = {'rows': len(rows), 'differ': len(bad), 'first': bad[:5]}
    print(f'token ids, {split}: {len(bad)} of {len(rows)} rows differ from sharedbert\'s',
          flush=True)

  # 2. The same steps: order, learning rate, AdamW, clipping; dropout off.
  lrs = ref['lrs']
  opt = adamw(model, args, float(lrs[0]))
  batch = meta['batch_size']
  losses, step = [], 0
  model.train()
  for order in ref['orders']:
    for i in range(-(-len(order) // batch)):
      rows = [train[j] for j in order[i * batch:(i + 1) * batch]]
      labels = torch.tensor([r[2] for r in rows], dtype=torch.long)
      loss = torch.nn.functional.cross_entropy(model(**encode(rows)).logits, labels)
      for group in opt.param_groups:
        group['lr'] = float(lrs[step])
      opt.zero_grad()
      loss.backward()
      torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
      opt.step()
      losses.append(loss.item())
      step += 1
  model.eval()
  logits = []
  with torch.no_grad():
    for i in range(0, len(dev), 128):
      logits.append(model(**encode(dev[i:i + 128])).logits.numpy())
  logits = np.concatenate(logits)
  ours = np.asarray(losses)
  diff = np.abs(ours - ref['losses'])
  parted = np.nonzero(diff > args.tolerance)[0]
  labels = np.asarray([r[2] for r in dev])
  out = {'task': args.task, 'settings': meta, 'dropout': dropout,
         'tolerance': args.tolerance, 'token_ids': differ, 'steps': len(losses),
         'first_parting_step': int(parted[0]) if len(parted) else None,
         'max_loss_diff': float(diff.max()),
         'max_loss_diff_first_100': float(diff[:100].max()),
         'hf_losses': losses, 'sharedbert_losses': ref['losses'].tolist(),
         'dev_accuracy': {'hf': float(np.mean(logits.argmax(-1) == labels)),
                          'sharedbert': float(meta['dev_accuracy'])},
         'dev_logits_max_diff': float(np.abs(logits - ref['dev_logits']).max()),
         'dev_predictions_differ': int(np.sum(logits.argmax(-1) !=
                                              ref['dev_logits'].argmax(-1)))}
  for s in (0, 1, 2, 10, 50, 99, len(losses) - 1):
    if s < len(losses):
      print(f'step {s}: lr {lrs[s]:.3e} loss hf {losses[s]:.6f} sharedbert '
            f'{ref["losses"][s]:.6f} diff {diff[s]:.2e}')
  print(f'{len(losses)} steps; largest loss difference {out["max_loss_diff"]:.2e} '
        f'(first 100 steps {out["max_loss_diff_first_100"]:.2e}); first step parting by more '
        f'than {args.tolerance:g}: {out["first_parting_step"]}; dev accuracy hf '
        f'{out["dev_accuracy"]["hf"]:.4f} sharedbert {out["dev_accuracy"]["sharedbert"]:.4f}; '
        f'dev logits differ by up to {out["dev_logits_max_diff"]:.2e}, '
        f'{out["dev_predictions_differ"]} predictions differ', flush=True)
  return out


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
  parser.add_argument('--schedule', default='hf', choices=['hf', 'sharedbert'],
                      help="hf: get_linear_schedule_with_warmup (the first step's rate is 0); "
                      "sharedbert: sharedbert.optim's (the first step learns, the last is 0)")
  parser.add_argument('--classifier_init', default='normal',
                      choices=['normal', 'truncated_normal'],
                      help="the fresh classifier's weights: transformers' N(0, range) or "
                      "sharedbert's (BERT's) normal cut at ±2 std")
  parser.add_argument('--matched', default='',
                      help='a folder of tools/glue_matched.py: repeat its run step for step')
  parser.add_argument('--tolerance', type=float, default=1e-4,
                      help='matched mode: the largest per-step loss difference called equal')
  args = parser.parse_args()
  import torch
  torch.set_num_threads(args.threads)
  if args.matched:
    meta = json.load(open(os.path.join(args.matched, 'sharedbert.json')))
    args.max_train_examples = meta['max_train_examples']
  train = subset(read_split(args.glue_dir, args.task, 'train'), args.max_train_examples)
  dev = read_split(args.glue_dir, args.task, 'dev')
  if args.matched:
    out = run_matched(args, meta, train, dev)
    with open(args.out, 'w') as f:
      json.dump(out, f, indent=1)
    return
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
