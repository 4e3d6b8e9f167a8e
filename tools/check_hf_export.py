r"""Checks an exported directory with real transformers against sharedbert (two processes).

Needs torch and transformers (not sharedbert's dependencies); run it with a Python that
has them, and point --sharedbert_python at one that has sharedbert:

  python tools/check_hf_export.py --hf_dir=/tmp/bert_out --workdir=WORKDIR \
      [--sharedbert_python=python] [--sentences=FILE] [--masked=FILE]

- the tokenizer: `AutoTokenizer.from_pretrained(hf_dir)` ids == sharedbert's ids on every
  sentence (the built-in ones, or one a line from --sentences);
- BertForMaskedLM or RobertaPreLayerNormForMaskedLM (a pretraining workdir, post- or
  pre-LN): `pipeline("fill-mask")` top-5 ids == those of
  `sharedbert.restore(workdir).fill_mask`, and the largest score difference;
- Bert- or RobertaPreLayerNormForSequenceClassification (a fine-tuned
  WORKDIR/<task>/seed_<s>): logits of `AutoModelForSequenceClassification` vs
  `sharedbert.restore(seed_dir).logits`.
- the MLM logits of AutoModelForMaskedLM at every position of a padded batch against
  sharedbert's.
Custom-code exports (every variant but standard, `convert_hf export`) load with
trust_remote_code=True, which the tool always passes. Prints the figures; exits 1 if ids
or the fill-mask top 5 differ, or logits differ by more than 1e-5 (classifier) or 1e-4 (MLM).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

SENTENCES = [
    'Return the number of items in the list.', 'The cat sat on the mat.',
    'This module provides access to some objects used or maintained by the interpreter.',
    'Raise a ValueError if the value is not found.', 'It is a truth universally acknowledged.',
    '  Leading and   trailing  spaces  ', 'Ünïcödé, café and naïve text.',
]
MASKED = [
    'Return the [MASK] of items in the list.', 'Raise a [MASK] if the value is not found.',
    'The [MASK] is not defined.', 'This function returns a new [MASK].',
    'Open the file and [MASK] its contents.', 'The cat sat on the [MASK].',
]

_OURS = r'''
import json, sys
import numpy as np
import sharedbert
args = json.loads(sys.argv[1])
run = sharedbert.restore(args['workdir'])
out = {'ids': run.tokenizer.encode(args['sentences'])}
if hasattr(run, 'fill_mask'):
  out['fill'] = [[(g['token_id'], g['score']) for g in run.fill_mask(t)] for t in args['masked']]
  out['unanswerable'] = np.flatnonzero(~run.answerable()).tolist()
  # MLM logits at every position of a padded batch, for the largest difference.
  ids = run._tokenize(args['sentences'], None)
  mask = (ids != run.tokenizer.pad_id).astype(np.int32)
  positions = np.tile(np.arange(ids.shape[1]), (len(ids), 1))
  logits = run.model.apply({'params': run.params}, ids, np.zeros_like(ids), mask,
                           positions)['mlm_logits']
  out['batch'] = ids.tolist()
  out['mlm_logits'] = np.asarray(logits).tolist()
else:
  out['logits'] = run.logits(args['sentences']).tolist()
print('JSON' + json.dumps(out))
'''


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--hf_dir', required=True)
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--sharedbert_python', default=sys.executable)
  parser.add_argument('--sentences', default='')
  parser.add_argument('--masked', default='', help='sentences with one [MASK], one a line')
  args = parser.parse_args()
  sentences = SENTENCES
  if args.sentences:
    with open(args.sentences, encoding='utf-8') as f:
      sentences = [l.rstrip('\n') for l in f if l.strip()]

  masked = MASKED
  if args.masked:
    with open(args.masked, encoding='utf-8') as f:
      masked = [l.rstrip('\n') for l in f if l.strip()]

  import numpy as np
  import torch
  import transformers
  print(f'transformers {transformers.__version__}, torch {torch.__version__}')
  request = json.dumps({'workdir': args.workdir, 'sentences': sentences, 'masked': masked})
  done = subprocess.run([args.sharedbert_python, '-c', _OURS, request], capture_output=True,
                        text=True, env=dict(os.environ, JAX_PLATFORMS='cpu'))
  if done.returncode:
    sys.exit(f'sharedbert failed:\n{done.stderr[-3000:]}')
  ours = json.loads(next(l for l in done.stdout.splitlines() if l.startswith('JSON'))[4:])

  tok = transformers.AutoTokenizer.from_pretrained(args.hf_dir)
  print(f'AutoTokenizer: {type(tok).__name__}, {len(tok)} tokens')
  theirs = [tok(s, add_special_tokens=False)['input_ids'] for s in sentences]
  same = sum(a == b for a, b in zip(ours['ids'], theirs))
  print(f'token ids equal on {same} of {len(sentences)} sentences')
  failed = same != len(sentences)
  for s, a, b in zip(sentences, ours['ids'], theirs):
    if a != b:
      print(f'  differ: {s[:60]!r}: sharedbert {a[:12]} transformers {b[:12]}')

  # Harmless for transformers' own architectures; needed for sharedbert's custom code.
  remote = {'trust_remote_code': True}
  config = transformers.AutoConfig.from_pretrained(args.hf_dir, **remote)
  print(f'model_type {config.model_type}, architectures {config.architectures}'
        + (f', attention {config.attention_variant}' if config.model_type == 'sharedbert' else ''))
  if any(a.endswith('ForSequenceClassification') for a in (config.architectures or [])):
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        args.hf_dir, **remote).eval()
    batch = tok(sentences, padding=True, return_tensors='pt')
    with torch.no_grad():
      logits = model(**batch).logits.numpy()
    err = float(np.max(np.abs(logits - np.asarray(ours['logits']))))
    print(f'classifier logits: max |transformers - sharedbert| = {err:.2e} over '
          f'{logits.size} values')
    failed |= err > 1e-5
  else:
    # sharedbert's fill_mask never answers special tokens or a lone '▁': the pipeline's
    # top-5 among the same candidates (its scores are over the whole vocabulary, as ours).
    skip = set(ours['unanswerable'])
    fill = transformers.pipeline('fill-mask', model=args.hf_dir, tokenizer=tok,
                                 top_k=5 + len(skip), **remote)
    equal, worst = 0, 0.0
    for text, want in zip(masked, ours['fill']):
      got = [g for g in fill(text.replace('[MASK]', tok.mask_token))
             if g['token'] not in skip][:5]
      got_ids = [g['token'] for g in got]
      equal += got_ids == [i for i, _ in want]
      scores = {g['token']: g['score'] for g in got}
      worst = max(worst, max(abs(scores[i] - s) if i in scores else 1.0 for i, s in want))
      print(f'  {text!r}: transformers {[g["token_str"] for g in got]} ids {got_ids}; '
            f'sharedbert ids {[i for i, _ in want]}')
    print(f'fill-mask top-5 ids equal on {equal} of {len(masked)} sentences; max score '
          f'difference {worst:.2e}')
    failed |= equal != len(masked)
    model = transformers.AutoModelForMaskedLM.from_pretrained(args.hf_dir, **remote).eval()
    ids = torch.tensor(ours['batch'])
    with torch.no_grad():
      logits = model(input_ids=ids, attention_mask=(ids != 0).long()).logits.numpy()
    err = float(np.max(np.abs(logits - np.asarray(ours['mlm_logits']))))
    print(f'MLM logits (a padded batch of {len(ids)} sentences, every position): max '
          f'|transformers - sharedbert| = {err:.2e} over {logits.size} values')
    failed |= err > 1e-4
  if failed:
    sys.exit(1)
  print('OK')


if __name__ == '__main__':
  main()
