r"""Uptraining a real encoder into shared attention (sharedbert/lab/uptrain.py).

  sharedbert uptrain --encoder=HF_DIR --data=DATA --workdir=W                # the cpu preset
  sharedbert uptrain --config=configs/uptrain.py:smoke --encoder=... --data=... --workdir=W
  sharedbert uptrain ... --config.minutes=30 --config.curve=0,10,30 --config.glue_at=0,30

HF_DIR is a Hugging Face BERT encoder (e.g. all-MiniLM-L6-v2); DATA holds corpus/ (the
uptraining text) and glue/ (glue_data: STS-B's dev set for the zero-shot curve, and the
fine-tuning task). Three arms continue masked-LM training for the same training time:
  original   the encoder itself (standard attention; a fresh MLM head on a sentence encoder)
  converted  shared attention fitted to it (`convert.fit`, weighted by corpus text)
  fresh      shared attention newly initialised, everything else copied: what the fit is
             worth once training continues
A minute is a minute of training steps of that arm (compilation, evaluation and checkpoint
saves excluded), each arm a process on one core of its own, `workers` at a time.

Presets (the word after the colon):
  cpu    sized for all-MiniLM-L6-v2 on the 2-core machine: 60 minutes per arm, warmup 200
         steps, batch 32 x 128 tokens at lr 1e-4; the curve at 0/5/15/30/45/60 minutes;
         SST-2 fine-tuned at 0, 15 and 60 minutes with parity's recipe (1,000 training
         examples, 3 epochs, batch 32, lr 1e-4, length 64; 3 seeds). SST-2, not MRPC: at
         this recipe both shared arms score MRPC's majority-label 74.8 while the original
         scores 78, too narrow a range to say what a conversion keeps. docs/uptrain_cpu.
  smoke  a fixed 10 steps a "minute" and tiny sizes: the machinery (conversion, curve,
         snapshots, GLUE, report, resume) for tests/test_uptrain.py; nothing is timed.
"""

import ml_collections

from sharedbert import config as sb_config
from sharedbert.errors import UserError

PRESETS = ('cpu', 'smoke')


def get_config(arg=None):
  args = sb_config.parse_arg(arg, {'preset': 'cpu'})
  preset = args['preset']
  if preset not in PRESETS:
    raise UserError(f'unknown uptrain preset {preset!r}; choose {", ".join(PRESETS)}')

  config = ml_collections.ConfigDict()
  config.mode = 'uptrain'
  config.preset = preset
  # First, every conversion fit scored without training (sharedbert conversion, into
  # W/conversion; its summary's `conversion` is merged into W/summary.json).
  config.conversion = True
  config.arms = ('converted', 'original', 'fresh')  # Started in this order.
  config.convert = ml_collections.ConfigDict()
  config.convert.attention = 'shared'   # The converted and the fresh arm's variant.
  config.convert.fit = 'function'       # sharedbert.convert.shared's --fit.
  config.convert.fit_texts = 2000       # Corpus paragraphs weighting the fit (0: unweighted).
  config.convert.seed = 0               # The fresh arm's initialisation.

  config.minutes = 60.0                 # Training time per arm.
  config.curve = (0, 5, 15, 30, 45, 60)  # Held-out MLM loss and zero-shot STS-B at these.
  config.glue_at = (0, 15, 60)          # Fine-tuned at these (each also on the curve).
  # Steps per training minute: 0 measures each arm's own over its first calibration_steps
  # steps (inside the warmup, whose rates do not depend on the schedule's length), and
  # fixes its schedule and checkpoints from it; > 0 fixes it for every arm (tests).
  config.steps_per_minute = 0.0
  config.calibration_steps = 20
  config.workers = 2                    # Jobs at once, each a process on a core of its own.
  config.stsb_pairs = 0                 # Zero-shot STS-B dev pairs (0: all 1,500).
  config.stsb_seq_len = 128

  config.pretrain = ml_collections.ConfigDict()
  config.pretrain.seq_len = 128
  config.pretrain.batch_size = 32
  config.pretrain.lr = 1e-4
  config.pretrain.warmup_steps = 200
  config.pretrain.eval_fraction = 0.05  # The split whose paragraphs the fit never saw.
  config.pretrain.eval_batches = 20     # Held-out batches per point of the curve.
  config.pretrain.log_every_steps = 10

  config.glue = ml_collections.ConfigDict()
  config.glue.task = 'sst2'             # Results in W/glue/<task>/<arm>_<minutes>.
  config.glue.seeds = 3
  config.glue.seq_len = 64
  config.glue.max_train_examples = 1000
  config.glue.num_epochs = 3
  config.glue.batch_size = 32
  config.glue.lr = 1e-4
  config.confidence = 0.95
  config.bootstrap_resamples = 1000

  if preset == 'smoke':
    config.convert.fit_texts = 20
    config.minutes = 3.0
    config.curve = (0, 1, 3)
    config.glue_at = (0, 3)
    config.steps_per_minute = 10.0
    config.calibration_steps = 5
    config.stsb_seq_len = 16
    config.pretrain.seq_len = 16
    config.pretrain.batch_size = 8
    config.pretrain.lr = 1e-3
    config.pretrain.warmup_steps = 5
    config.pretrain.eval_fraction = 0.2
    config.pretrain.eval_batches = 2
    config.pretrain.log_every_steps = 5
    config.glue.task = 'mrpc'
    config.glue.seeds = 2
    config.glue.seq_len = 16
    config.glue.max_train_examples = 16
    config.glue.num_epochs = 1
    config.glue.batch_size = 8
    config.bootstrap_resamples = 50
  return config
