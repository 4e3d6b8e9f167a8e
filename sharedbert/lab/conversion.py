r"""How much of a real pretrained encoder's function each conversion keeps, without training.

  python -m sharedbert.lab.conversion --encoder=HF_DIR --data=DATA --workdir=W

HF_DIR: a Hugging Face BERT-architecture encoder (e.g. sentence-transformers'
all-MiniLM-L6-v2); DATA: a folder with corpus/ (text) and glue/ (glue_data, STS-B's dev set
is read). Steps, each skipped when its result exists (a killed run resumes):
  1. W/standard: the encoder imported (sharedbert.convert.hf import).
  2. W/<arm>: the encoder converted by each arm of ARMS (sharedbert.convert.shared): shared
     by the weight-space rank-one fit, by the function fit, and by the function fit
     weighted by the layer inputs on DATA/corpus (`--fit_text`); symmetric likewise with
     the mean of W_q and W_k as the weight-space fit; kv_shared by its function fit.
  3. For the original and every arm: the zero-shot STS-B dev Spearman of mean-pooled
     sentence embeddings (sharedbert.evaluators.sts) and each layer's relative output error
     on held-out corpus paragraphs (the pretraining pipeline's 'eval' split, never fitted on).
  4. W/summary.json (`conversion.<arm>.stsb_spearman`, ...) and W/report.md.
"""

from __future__ import annotations

import os
import time

from absl import app
from absl import flags
from absl import logging

from sharedbert.errors import UserError, one_line_errors
from sharedbert.utils import jsonio
from sharedbert.utils import paths
from sharedbert.utils import reporting
from sharedbert.convert import hf as convert_hf
from sharedbert.convert import shared as convert_shared
from sharedbert.evaluators import common as evaluators_lib
from sharedbert.evaluators import sts
from sharedbert.tasks.pretrained import PretrainedRun

FLAGS = flags.FLAGS

# name: (variant, fit, weighted by the corpus). The shared names are the keys:
# 'rank1' (today's fit) and 'function' / 'function_text' (the new one).
ARMS = {
    'rank1': ('shared', 'rank1', False),
    'function': ('shared', 'function', False),
    'function_text': ('shared', 'function', True),
    'symmetric_mean': ('symmetric', 'mean', False),
    'symmetric_function': ('symmetric', 'function', False),
    'symmetric_function_text': ('symmetric', 'function', True),
    'kv_shared_function': ('kv_shared', 'function', False),
}
FIT_TEXTS = 2000        # Corpus paragraphs that weight the fits.
HELDOUT_TEXTS = 256     # Held-out paragraphs the layer errors are measured on.
SEQ_LEN = 128


def _define_flags():
  flags.DEFINE_string('encoder', None, 'A Hugging Face BERT encoder folder.')
  flags.DEFINE_string('data', None, 'A folder with corpus/ and glue/ (STS-B).')
  flags.DEFINE_string('workdir', None, 'Where everything is written.')
  flags.DEFINE_bool('verbose', False, 'Show tracebacks of user errors.')


def convert_all(encoder: str, data: str, workdir: str) -> None:
  source = os.path.join(workdir, 'standard')
  if not os.path.exists(os.path.join(source, 'config.json')):
    convert_hf.import_hf(encoder, source)
  for name, (variant, fit, weighted) in ARMS.items():
    target = os.path.join(workdir, name)
    if os.path.exists(os.path.join(target, 'config.json')):
      continue
    t0 = time.time()
    text = convert_shared.convert_workdir(
        source, target, variant, fit=fit, fit_text=os.path.join(data, 'corpus') if weighted
        else None, fit_texts=FIT_TEXTS)
    jsonio.write_text(os.path.join(workdir, 'fits', f'{name}.txt'), text + '\n')
    logging.info('conversion: %s in %.0fs', name, time.time() - t0)


def evaluate_all(data: str, workdir: str) -> dict:
  original = convert_hf.read_encoder(os.path.join(workdir, 'standard'))
  heldout = sts.tokenize(original[2], convert_shared.sample_texts(
      os.path.join(data, 'corpus'), HELDOUT_TEXTS, split='eval'),
      min(SEQ_LEN, original[0].max_position_embeddings))
  results = {}
  for name in ['original'] + list(ARMS):
    path = os.path.join(workdir, 'results', f'{name}.json')
    if os.path.exists(path):
      results[name] = jsonio.read_json(path)
      continue
    folder = os.path.join(workdir, 'standard' if name == 'original' else name)
    cfg, params, tok = convert_hf.read_encoder(folder)
    t0 = time.time()
    stsb = evaluators_lib.from_config(
        'sts', evaluators_lib.EncoderRun(PretrainedRun(folder, cfg, tok)),
        glue_dir=os.path.join(data, 'glue'), seq_len=SEQ_LEN).run({'bert': params})
    result = {'stsb_spearman': stsb['spearman'],
              'layer_errors': sts.layer_errors(original[0], original[1], cfg, params, *heldout),
              'variant': 'standard' if name == 'original' else ARMS[name][0],
              'fit': None if name == 'original' else ARMS[name][1],
              'weighted_by_text': False if name == 'original' else ARMS[name][2],
              'stsb_pairs': stsb['pairs'], 'heldout_texts': len(heldout[0])}
    result['wall_s'] = round(time.time() - t0, 1)
    jsonio.write_json(path, result)
    logging.info('conversion: %s: STS-B Spearman %.4f', name, result['stsb_spearman'])
    results[name] = result
  return results


def report(encoder: str, data: str, workdir: str, results: dict, wall_s: float) -> str:
  rows = []
  for name, r in results.items():
    variant, fit, weighted = ARMS.get(name, ('standard', '–', False))
    rows.append([f'`{name}`', variant, fit + (' + corpus weighting' if weighted else ''),
                 f'{r["stsb_spearman"]:.4f}'] + [f'{e:.3f}' for e in r['layer_errors']])
  layers = len(next(iter(results.values()))['layer_errors'])
  best = max((n for n in results if ARMS.get(n, ('',))[0] == 'shared'),
             key=lambda n: results[n]['stsb_spearman'])
  lines = [f'# Conversion without training: `{paths.display(encoder)}`', '',
           f'Zero-shot STS-B dev Spearman (cosine of mean-pooled final hidden states, '
           f'{results["original"]["stsb_pairs"]} pairs) of the original encoder and of each '
           f'conversion, and each layer\'s relative output error |h - h_orig| / |h_orig| on '
           f'{results["original"]["heldout_texts"]} held-out paragraphs of '
           f'`{paths.display(os.path.join(data, "corpus"))}`. The best shared conversion, '
           f'`{best}`, keeps {results[best]["stsb_spearman"]:.3f} of the original\'s '
           f'{results["original"]["stsb_spearman"]:.3f}.', '',
           *reporting.md_table(['arm', 'variant', 'fit', 'STS-B Spearman']
                               + [f'layer {i}' for i in range(layers)], rows),
           '', f'Wall time {reporting.duration(wall_s)} (this invocation). Fit errors per layer: '
           '`fits/<arm>.txt`; how the fits work: docs/checkpoints.md.', '']
  if os.path.isfile(os.path.join(workdir, 'uptrain.md')):
    lines += ['Training on after the conversion (`sharedbert uptrain`: the converted encoder, '
              'the original and a fresh-attention control for the same training time): '
              '[uptrain.md](uptrain.md).', '']
  if os.path.isfile(os.path.join(workdir, 'parity.md')):
    lines += ['GLUE fine-tuning of the original encoder by sharedbert against Hugging Face: '
              '[parity.md](parity.md) (tools/glue_parity.py).', '']
  return '\n'.join(lines)


def run(encoder: str, data: str, workdir: str) -> str:
  for path, what in ((encoder, '--encoder'), (os.path.join(data, 'corpus'), '--data'),
                     (os.path.join(data, 'glue', 'STS-B'), '--data')):
    if not os.path.isdir(path):
      raise UserError(f'{what}: {path} is not a folder')
  convert_hf.check_hf_dir(encoder)  # A folder that is no BERT: refused before W/ exists.
  t0 = time.time()
  os.makedirs(workdir, exist_ok=True)
  convert_all(encoder, data, workdir)
  results = evaluate_all(data, workdir)
  # Other parts of the folder's summary (tools/glue_parity.py's `parity`) are kept.
  path = os.path.join(workdir, 'summary.json')
  summary = jsonio.read_json(path) if os.path.isfile(path) else {}
  summary.update({'encoder': paths.display(encoder), 'conversion': results})
  jsonio.write_json(path, summary)
  text = report(encoder, data, workdir, results, time.time() - t0)
  jsonio.write_text(os.path.join(workdir, 'report.md'), text)
  return os.path.join(workdir, 'report.md')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  with one_line_errors('sharedbert conversion', FLAGS.verbose):
    if not (FLAGS.encoder and FLAGS.data and FLAGS.workdir):
      raise UserError('--encoder, --data and --workdir are required')
    print(run(FLAGS.encoder, FLAGS.data, FLAGS.workdir))


if __name__ == '__main__':
  _define_flags()
  from sharedbert import cli
  app.run(main, flags_parser=cli.flags_parser('sharedbert conversion',
                                              'sharedbert.lab.conversion'))
