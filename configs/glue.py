r"""GLUE fine-tuning and evaluation of a pretrained encoder (sharedbert/tasks/finetune.py).

  python -m sharedbert.main --config=configs/glue.py:task=cola \
      --config.init_from=PRETRAIN_WORKDIR --config.data.glue_dir=/path/to/glue_data --workdir=W

Arguments after the colon: `task` (a GLUE task name, a comma-separated list, or `all`:
every task found in data.glue_dir, or prepared in tfds) and `seeds` (fine-tuning runs
per task, with seeds seed, seed+1, ...). A bare word is the task: `configs/glue.py:cola`;
a list continues after `task=`: `configs/glue.py:task=cola,sst2,seeds=3`.

The recipe is the GLUE fine-tuning of Courtois et al. (arXiv 2406.06366; docs/design.md):
sequence length 128, 5 epochs, AdamW lr 1e-5, 10% linear warmup then linear decay,
batch 16, 5 seeds, scored on the dev sets at the end of the last epoch. Weight decay
0.01, eps 1e-6 and global-norm clipping at 1.0 are BERT's (Devlin et al. 2018). Every
value can be overridden: `--config.optim.lr=2e-5 --config.batch_size=32`.
"""

import ml_collections

from sharedbert import config as sb_config


def get_config(arg=None):
  args = sb_config.parse_arg(arg, {'task': 'all', 'seeds': 5}, lists=('task',))

  config = ml_collections.ConfigDict()
  config.mode = 'finetune'
  config.task = args['task']
  config.seeds = args['seeds']        # Fine-tuning runs per task.
  config.seed = 0                     # The first seed; the others are seed+1, seed+2, ...
  # The pretraining workdir (its config.json, vocab.model and latest checkpoint).
  config.init_from = ''
  # True: the same architecture and vocabulary, randomly initialized (a no-pretraining
  # baseline); the pretrained weights are not read.
  config.from_scratch = False
  # What the classifier reads: 'cls' (BERT's pooler on [CLS]) or 'mean' (the mean of the
  # last layer over the real tokens; for encoders pretrained by MLM alone, whose [CLS]
  # output and pooler were never trained). Hugging Face export needs 'cls'.
  config.pooling = 'cls'

  config.data = ml_collections.ConfigDict()
  config.data.glue_dir = ''           # A glue_data folder (CoLA/, SST-2/, ...); wins over tfds.
  config.data.tfds_data_dir = ''      # Where tfds glue/<task> is prepared ('' = tfds' default).
  config.data.seq_len = 128           # Longest [CLS] a [SEP] b [SEP]; longer pairs are truncated.
  config.data.max_train_examples = 0  # >0: a fixed random subset of the training set.
  config.data.skip_malformed = False  # glue_data only: skip bad rows instead of stopping.

  config.optim = ml_collections.ConfigDict()
  config.optim.lr = 1e-5
  config.optim.warmup_fraction = 0.1  # Of all the task's steps; then linear decay to 0.
  config.optim.weight_decay = 0.01
  config.optim.b1 = 0.9
  config.optim.b2 = 0.999
  config.optim.eps = 1e-6
  config.optim.grad_clip_norm = 1.0

  config.num_epochs = 5
  config.batch_size = 16              # Global batch, over all processes.
  config.log_every_steps = 500        # Progress lines within an epoch (0: per epoch only).

  config.eval = ml_collections.ConfigDict()
  config.eval.batch_size = 128
  config.eval.bootstrap_resamples = 1000
  config.eval.confidence = 0.95
  config.eval.bootstrap_seed = 0
  # False: report the last epoch. True: report the epoch with the best dev score (MNLI: matched)
  # (chosen on the same dev set it is scored on, so optimistic; results.md says so).
  config.eval.select_best_epoch = False
  config.eval.predict_test = True     # Write test predictions in the GLUE submission format.

  # Evaluators run on each seed's final model (sharedbert/evaluators/common.py), by name,
  # each with its settings; their results go into the seed's metrics.json under
  # `evaluators`. None by default; in a config file, e.g.:
  #   config.evaluators.robustness = ml_collections.ConfigDict(dict(levels=(0.0, 0.2),
  #                                                                 noise_seeds=2))
  #   config.evaluators.sts = ml_collections.ConfigDict()   # Zero-shot STS-B dev Spearman.
  # Built in: robustness, crossdomain, linear_probe, sts.
  config.evaluators = ml_collections.ConfigDict()

  # The fine-tuned classifier of each seed, kept under W/<task>/seed_<s>/checkpoints/<epoch>
  # (one orbax checkpoint per epoch): the last max_to_keep epochs, or with
  # eval.select_best_epoch the max_to_keep best on dev. 0: keep none.
  config.ckpt = ml_collections.ConfigDict()
  config.ckpt.max_to_keep = 1

  config.mesh = ml_collections.ConfigDict()
  config.mesh.data = -1
  config.mesh.fsdp = 1
  config.mesh.tensor = 1
  config.mesh.logical_axis_rules = sb_config.DEFAULT_LOGICAL_AXIS_RULES
  return config
