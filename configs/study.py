r"""The controlled comparison of attention variants (sharedbert/study.py).

  python -m sharedbert.study --config=configs/study.py:cpu --workdir=W
  python -m sharedbert.study --config=configs/study.py:gpu --workdir=W --config.seeds=5

Every variant in `variants` is pretrained under one recipe (the same vocabulary, data
order, steps and seed: `pretrain`), then fine-tuned on `glue.tasks` with `seeds`
fine-tuning seeds (configs/glue.py with the overrides in `glue`), evaluated under
embedding noise (`robustness`) and across domains (`crossdomain`), and on SQuAD when
`squad.versions` is set. W/report.md gathers everything. Running the same command again
resumes: finished runs are skipped.

Presets (the word after the colon; `data=DIR` points at a folder with corpus/ and glue/):
  cpu  tiny models (L=2, D=64, vocabulary 2048) on a local corpus and glue_data, 3,000
       pretraining steps (about 0.09 s each on 2 idle cores), at most 2,000 training
       examples per task (glue.override.data.max_train_examples), 3 epochs at lr 1e-3.
       No SQuAD, and only the cross-domain pairs the local GLUE tasks allow (MRPC <->
       STS-B).
  gpu  one GPU: L=4, D=256 models, 20k pretraining steps on a local corpus (or
       corpus=tfds:...), full GLUE training sets from tfds, SQuAD v1.1 and v2.0 from
       tfds, the full cross-domain matrix.
  pod  the BERT-base recipe of configs/<variant>_base.py (Wikipedia from tfds, 200k steps,
       batch 256) and configs/glue.py's recipe (5 epochs, lr 1e-5, 5 seeds), everything
       from tfds.
"""

import ml_collections

from sharedbert import config as sb_config

GLUE_TASKS_ALL = ('cola', 'sst2', 'mrpc', 'stsb', 'qqp', 'mnli', 'qnli', 'rte')
CROSSDOMAIN_ALL = ('sst2->imdb', 'mrpc->qqp', 'qqp->mrpc', 'mnli->rte', 'mrpc->stsb',
                   'stsb->mrpc')


def get_config(arg=None):
  args = sb_config.parse_arg(arg, {'preset': 'cpu', 'data': '../shared/data', 'corpus': ''})
  preset = args['preset']
  if preset not in ('cpu', 'gpu', 'pod'):
    raise ValueError(f'unknown study preset {preset!r}; choose cpu, gpu or pod')

  config = ml_collections.ConfigDict()
  config.mode = 'study'
  config.preset = preset
  config.variants = ('standard', 'shared', 'symmetric', 'pairwise')
  config.seeds = 3                    # Fine-tuning seeds per task: 0, 1, ..., seeds-1.
  config.confidence = 0.95
  config.bootstrap_resamples = 1000

  # Pretraining: configs/<variant>_base.py:<arg>, then these overrides (any key of the
  # pretraining config; the same for every variant). One vocabulary, learned once.
  config.pretrain = ml_collections.ConfigDict()
  # BERT's recipe, as in the reference run in docs/study_cpu (the budget recipe of
  # docs/recipe.md is one argument away: 'size=tiny,recipe=budget').
  config.pretrain.arg = 'size=tiny,recipe=bert'
  config.pretrain.override = ml_collections.ConfigDict()
  config.pretrain.override.seed = 0

  # Fine-tuning: configs/glue.py, then these overrides; one run per (variant, task, seed).
  config.glue = ml_collections.ConfigDict()
  config.glue.tasks = ('cola', 'sst2', 'mrpc', 'stsb')
  config.glue.override = ml_collections.ConfigDict()
  config.glue.override.data = ml_collections.ConfigDict()

  # Robustness: Gaussian noise on the input embeddings of the fine-tuned models (dev sets).
  # The noise std at level l is l times the std of the embedding output over each
  # sequence's non-pad tokens (sharedbert.models.bert.add_embedding_noise).
  config.robustness = ml_collections.ConfigDict()
  config.robustness.tasks = ('cola', 'sst2', 'mrpc', 'stsb')
  config.robustness.levels = (0.0, 0.1, 0.2, 0.3, 0.4)
  config.robustness.noise_seeds = 3
  config.robustness.eval_batch_size = 128

  # Cross-domain: a model fine-tuned on the source task, scored on the target's dev set
  # with the label mapping of sharedbert.crossdomain.TRANSFERS.
  config.crossdomain = ml_collections.ConfigDict()
  config.crossdomain.pairs = ('mrpc->stsb', 'stsb->mrpc')
  config.crossdomain.stsb_threshold = 4.0  # STS-B score >= this counts as a paraphrase.
  config.crossdomain.tfds_data_dir = ''
  config.crossdomain.max_target_examples = 0  # >0: a fixed random subset of the target set.

  # SQuAD (sharedbert.squad): versions among '1.1', '2.0'; empty skips it.
  config.squad = ml_collections.ConfigDict()
  config.squad.versions = ()
  config.squad.data_dir = ''          # Official JSON files (train-v1.1.json, dev-v1.1.json...);
                                      # '' reads tfds squad/v1.1, squad/v2.0.
  config.squad.tfds_data_dir = ''
  config.squad.seq_len = 384
  config.squad.doc_stride = 128
  config.squad.max_query_len = 64
  config.squad.max_answer_len = 30
  config.squad.n_best = 20
  config.squad.num_epochs = 2
  config.squad.batch_size = 32
  config.squad.lr = 5e-5
  config.squad.warmup_fraction = 0.1
  config.squad.max_train_examples = 0
  config.squad.max_eval_examples = 0

  data = args['data'].rstrip('/')
  if preset == 'cpu':
    # Sized for 2 shared CPU cores: compilation dominates, so few, small programs.
    p = config.pretrain.override
    p.model = ml_collections.ConfigDict(dict(num_layers=2, hidden_size=64, num_heads=2,
                                             mlp_dim=256, vocab_size=2048))
    p.data = ml_collections.ConfigDict()
    p.data.corpus = args['corpus'] or f'{data}/corpus'
    p.data.batch_size = 32
    p.data.seq_len = 64
    p.data.max_predictions = 10
    p.data.vocab_train_sentences = 50_000
    # 150 steps (session 1) left every variant at the most-frequent-token floor; 3,000
    # steps (about 6M tokens, two passes over ../shared/data/corpus) get past it.
    p.total_steps = 3000
    p.optim = ml_collections.ConfigDict()
    p.optim.lr = 1e-3
    p.optim.warmup_steps = 150
    p.log_every_steps = 100
    p.eval_every_steps = 500
    p.eval_batches = 5
    p.ckpt = ml_collections.ConfigDict()
    p.ckpt.every_steps = 500
    p.ckpt.max_to_keep = 1
    g = config.glue.override
    g.data.glue_dir = f'{data}/glue'
    g.data.seq_len = 64
    # lr 1e-4 on 1,000 examples for 2 epochs (session 1) left every model predicting the
    # majority label; tiny models from a short pretraining need a larger lr and more steps
    # (SST-2 with lr 1e-3, 4,000 examples, 3 epochs: 66.5% against a majority of 50.9%).
    g.data.max_train_examples = 2000
    g.num_epochs = 3
    g.batch_size = 32
    g.optim = ml_collections.ConfigDict()
    g.optim.lr = 1e-3
    g.eval = ml_collections.ConfigDict()
    g.eval.predict_test = False
    g.eval.bootstrap_resamples = 200
    g.log_every_steps = 0
    config.robustness.noise_seeds = 2  # Each noisy pass over a dev set costs; 2 seeds per level.
  elif preset == 'gpu':
    config.pretrain.arg = 'size=small,recipe=bert'
    p = config.pretrain.override
    p.data = ml_collections.ConfigDict()
    p.data.corpus = args['corpus'] or f'{data}/corpus'
    p.total_steps = 20_000
    p.model = ml_collections.ConfigDict()
    p.model.dtype = 'bfloat16'
    config.glue.tasks = GLUE_TASKS_ALL
    g = config.glue.override
    g.num_epochs = 3
    g.batch_size = 32
    g.optim = ml_collections.ConfigDict()
    g.optim.lr = 5e-5
    g.eval = ml_collections.ConfigDict()
    g.eval.predict_test = False
    config.robustness.tasks = ('sst2', 'mrpc', 'rte', 'stsb')
    config.crossdomain.pairs = CROSSDOMAIN_ALL
    config.crossdomain.max_target_examples = 5_000
    config.squad.versions = ('1.1', '2.0')
    config.squad.max_train_examples = 20_000
  else:  # pod: the papers' recipes, unchanged.
    config.pretrain.arg = f'size=base,corpus={args["corpus"]}' if args['corpus'] else 'size=base'
    config.seeds = 5
    config.glue.tasks = GLUE_TASKS_ALL
    config.glue.override.eval = ml_collections.ConfigDict()
    config.glue.override.eval.predict_test = False
    config.robustness.tasks = ('sst2', 'mrpc', 'rte', 'stsb', 'mnli')
    config.crossdomain.pairs = CROSSDOMAIN_ALL
    config.squad.versions = ('1.1', '2.0')
    config.squad.num_epochs = 2
    config.squad.lr = 3e-5
  return config
