"""The study's pretraining arms: seeds, a learning-rate sweep, the diagonals' init, widths.

Each arm is a set of pretraining runs (`Run`: variant, peak lr, seed, width, diag init),
each a sharedbert.train workdir under W/pretrain_runs/<variant>/<tag>/ (the reference run
of a variant, the one GLUE fine-tunes, stays W/pretrain/<variant>/). A run another arm
already asked for is run once. Two phases, because the second needs the first's answer:

  A  the reference runs; the sweep (every variant at each rate of `pretrain.lrs`, seed
     `pretrain.override.seed`); `shared` (pretrain.init_variant) at each init of
     `pretrain.inits` at the recipe's rate.
  B  at each variant's best swept rate (lowest final held-out loss; for `shared`, also its
     best init): seeds 0..seeds-1 at the reference width (the verdict), and seeds
     0..width_seeds-1 at every width of `pretrain.widths` for `pretrain.scaling_variants`
     (the scaling arm).

Seed s means config.seed = s for every variant: the same initialisation key, the same
batches and masks, and the same held-out masks, so differences pair by seed. Every run
is scored on the whole held-out split (eval_batches 0). With `pretrain.workers` > 1 the
runs go to that many processes, each pinned to one core; a killed study resumes every
run from its last checkpoint (train.py) and skips finished ones (study_done.json).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import time

from absl import logging
import ml_collections
import numpy as np
import flax.linen as nn
import jax
import jax.numpy as jnp
from scipy import stats as sp_stats

from sharedbert.errors import UserError
from sharedbert.metrics import stats
from sharedbert.utils import jsonio
from sharedbert.utils import workers as workers_lib
from sharedbert import train as train_lib
from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.data.pretrain import PretrainData, max_predictions
from sharedbert.lab import study_plan
from sharedbert.models import attention as attention_lib
from sharedbert.lab import attention_stats
from sharedbert.models import bert as bert_lib
from sharedbert.models import flops as flops_lib
from sharedbert.models import params as params_lib
from sharedbert.models.bert import ModelConfig

RUNS_DIR = 'pretrain_runs'
STEP0_FILE = 'step0_self_attention.json'
VERDICT_BASE = 'standard'


@dataclasses.dataclass(frozen=True, order=True)
class Run:
  variant: str
  lr: float
  seed: int
  width: int
  init: str

  @property
  def tag(self) -> str:
    return f'lr{self.lr:g}_seed{self.seed}_d{self.width}_{self.init}'

  def describe(self) -> str:
    return f'{self.variant} lr {self.lr:g} seed {self.seed} D={self.width} init {self.init}'


# ---------------------------------------------------------------------------------------
# The plan.

def init_of(cfg) -> str:
  """The diagonals' start a run's config names (model.diag_init_scheme); the default for
  a variant with no diagonals, as the study has always recorded it."""
  return str(cfg.model.get('diag_init_scheme',
                           attention_lib.DIAG_SETTINGS['diag_init_scheme']))


def reference(config, variant: str) -> Run:
  """The run of the study's recipe as configured: the one GLUE fine-tunes."""
  cfg = study_plan.pretrain_config(config, variant)
  return Run(variant, float(cfg.optim.lr), int(cfg.seed), int(cfg.model.hidden_size),
             init_of(cfg))


def _unique(runs):
  return list(dict.fromkeys(runs))


def phase_a(config, variants) -> list[Run]:
  p = config.pretrain
  runs = [reference(config, v) for v in variants]
  for v in variants:
    ref = reference(config, v)
    runs += [dataclasses.replace(ref, lr=float(lr)) for lr in p.lrs]
  if p.init_variant in variants:
    ref = reference(config, p.init_variant)
    runs += [dataclasses.replace(ref, init=str(i)) for i in p.inits]
  return _unique(runs)


def phase_b(config, variants, chosen: dict) -> list[Run]:
  """chosen: {variant: its run template at the best rate (and init), from `choose`}."""
  p = config.pretrain
  runs = []
  for v in variants:
    runs += [dataclasses.replace(chosen[v], seed=s) for s in range(int(p.seeds))]
  for v in scaling_variants(config, variants):
    runs += [dataclasses.replace(chosen[v], width=int(w), seed=s)
             for w in p.widths for s in range(int(p.width_seeds))]
  return _unique(runs)


def attention_variants() -> list[str]:
  return list(attention_lib.VARIANTS)


def scaling_variants(config, variants) -> list[str]:
  return [v for v in config.pretrain.scaling_variants if v in variants]


def widths(config, variants) -> list[int]:
  """Every width of the scaling arm, the reference width included, ascending."""
  ref = reference(config, variants[0]).width
  return sorted({ref, *(int(w) for w in config.pretrain.widths)})


def run_dir(config, workdir: str, run: Run) -> str:
  if run == reference(config, run.variant):
    return study_plan.pretrain_dir(workdir, run.variant)
  return os.path.join(workdir, RUNS_DIR, run.variant, run.tag)


def run_config(config, run: Run):
  """The run's pretraining config: the study's, with the run's rate, seed, width, init."""
  # An unlocked copy (the study's config is locked by its flag).
  override = ml_collections.ConfigDict(copy.deepcopy(config.pretrain.override.to_dict()))
  ref = study_plan.pretrain_config(config, run.variant)
  for group in ('optim', 'model'):
    if group not in override:
      override[group] = ml_collections.ConfigDict()
  override.optim.lr = run.lr
  override.seed = run.seed
  override.model.diag_init_scheme = run.init
  if run.width != ref.model.hidden_size:
    # Same depth, heads and FFN ratio; the budget recipe's init scale follows the width.
    ratio = ref.model.mlp_dim / ref.model.hidden_size
    if run.width % ref.model.num_heads:
      raise UserError(f'pretrain.widths: {run.width} is not a multiple of the '
                      f'{ref.model.num_heads} heads')
    override.model.hidden_size = run.width
    override.model.mlp_dim = int(round(ratio * run.width))
  return study_plan.pretrain_config(config, run.variant, override=override)


# ---------------------------------------------------------------------------------------
# Running.

def _load_done(path: str):
  import tensorflow as tf
  return jsonio.read_json(path) if tf.io.gfile.exists(path) else None


def pretrain_summary(run_dir: str) -> dict:
  """Final held-out MLM figures and the mean step time from a run's metrics.jsonl."""
  lines = jsonio.read_jsonl(os.path.join(run_dir, 'metrics.jsonl'))
  train = [l for l in lines if 'loss' in l and 'step_time' in l]
  evals = [l for l in lines if 'eval_loss' in l]
  step_times = [l['step_time'] for l in train]
  out = {'steps': max((l.get('step', 0) for l in lines), default=0),
         'step_time_mean': float(np.mean(step_times)) if step_times else None,
         'step_time_median': float(np.median(step_times)) if step_times else None}
  if evals:
    last = evals[-1]
    out.update(eval_loss=last['eval_loss'], eval_mlm_accuracy=last.get('eval_mlm_accuracy'),
               eval_majority_accuracy=last.get('eval_majority_accuracy'))
  if train:
    out['train_loss'] = train[-1]['loss']
  return out


def run_summary(cfg, run_dir_: str, wall_s: float) -> dict:
  """What the study keeps of a finished run: held-out figures, the held-out curve,
  parameters and FLOPs."""
  model_cfg = ModelConfig.from_config(cfg.model)
  counts = params_lib.parameter_counts(model_cfg)
  d = cfg.data
  step_flops = flops_lib.train_step_flops(model_cfg, d.batch_size, d.seq_len,
                                          d.batch_size * max_predictions(d))
  lines = jsonio.read_jsonl(os.path.join(run_dir_, 'metrics.jsonl'))
  out = pretrain_summary(run_dir_)
  out.update(
      variant=str(cfg.model.attention), wall_s=round(wall_s, 1), total_steps=int(cfg.total_steps), batch_size=int(d.batch_size),
      seq_len=int(d.seq_len), seed=int(cfg.seed), lr=float(cfg.optim.lr),
      width=int(cfg.model.hidden_size), init=init_of(cfg),
      eval_masked_tokens=next((l['eval_masked_tokens'] for l in reversed(lines)
                               if 'eval_masked_tokens' in l), None),
      # BertModel's parameters less its embeddings and pooler (unused by the MLM loss).
      non_embedding_params=int(counts['encoder total'] - counts['embeddings']
                               - counts['pooler']),
      train_step_flops=int(step_flops), train_flops=int(step_flops * cfg.total_steps),
      eval_curve=[[int(l['step']), float(l['eval_loss'])] for l in lines if 'eval_loss' in l])
  return out


def _train_one(cfg, run_dir_: str) -> dict:
  """Trains one run (resuming it) and writes its study_done.json; in any process."""
  import tensorflow as tf
  tf.io.gfile.makedirs(run_dir_)
  t0 = time.time()
  train_lib.train_and_evaluate(cfg, run_dir_)
  summary = run_summary(cfg, run_dir_, time.time() - t0)
  jsonio.write_json(os.path.join(run_dir_, study_plan.DONE_FILE), summary)
  return summary


def _prepare_vocab(config, workdir: str, variants, runs) -> None:
  """Learns the study's one vocabulary (in the first variant's reference run) and copies it
  into every run folder, so that all runs see the same token ids."""
  import tensorflow as tf
  first = study_plan.pretrain_dir(workdir, variants[0])
  vocab = os.path.join(first, tokenizer_lib.VOCAB_FILE)
  if not tf.io.gfile.exists(vocab):
    tf.io.gfile.makedirs(first)
    PretrainData(study_plan.pretrain_config(config, variants[0]), vocab)
  for run in runs:
    target = os.path.join(run_dir(config, workdir, run), tokenizer_lib.VOCAB_FILE)
    if not tf.io.gfile.exists(target):
      tf.io.gfile.makedirs(os.path.dirname(target))
      tf.io.gfile.copy(vocab, target)


def execute(config, workdir: str, runs: list[Run], *, progress: dict) -> dict:
  """Runs every unfinished run of `runs` (`pretrain.workers` at a time); returns
  {run: summary} for all of them. `progress` counts runs and seconds across phases."""
  results, todo = {}, []
  for run in runs:
    done = _load_done(os.path.join(run_dir(config, workdir, run), study_plan.DONE_FILE))
    if done is not None:
      results[run] = done
      if run not in progress['counted']:  # Finished by an earlier invocation.
        progress['counted'].add(run)
        progress['done'] += 1
    else:
      todo.append(run)
  if not todo:
    return results
  workers = max(1, min(int(config.pretrain.workers), len(todo)))
  logging.info('study: %d pretraining runs to do (%d finished), %d at a time',
               len(todo), len(results), workers)

  def finished(run, summary):
    results[run] = summary
    progress['counted'].add(run)
    progress['done'] += 1
    progress['timed'] += 1
    progress['seconds'] += summary['wall_s']
    left = progress['total'] - progress['done']
    # The mean time of the runs this invocation trained.
    eta = progress['seconds'] / progress['timed'] * left / workers
    logging.info('study: pretraining %d/%d done: %s: held-out loss %.4f in %.0fs; ETA of '
                 'the pretraining about %.0f min', progress['done'], progress['total'],
                 run.describe(), summary.get('eval_loss', float('nan')), summary['wall_s'],
                 eta / 60)

  def args_of(run):
    logging.info('study: pretraining %s in %s', run.describe(), run_dir(config, workdir, run))
    return run_config(config, run), run_dir(config, workdir, run)

  workers_lib.run_all(todo, _train_one, args_of, workers=workers, on_done=finished,
                      describe=lambda run: (f'study: pretraining {run.describe()} in '
                                            f'{run_dir(config, workdir, run)}'))
  return results


def _lowest(results: dict, candidates: list[Run]) -> Run | None:
  losses = {r: results.get(r, {}).get('eval_loss') for r in candidates}
  losses = {r: x for r, x in losses.items() if x is not None and math.isfinite(x)}
  return min(losses, key=losses.get) if losses else None


def choose(config, variants, results: dict) -> dict:
  """{variant: the run template phase B uses}: the swept rate with the lowest final held-out
  loss (the recipe's when nothing was swept) and, for the init variant, the init with the
  lowest final held-out loss (its inits run at the recipe's rate)."""
  out = {}
  for v in variants:
    ref = reference(config, v)
    rates = sorted({ref.lr, *(float(x) for x in config.pretrain.lrs)})
    best = _lowest(results, [dataclasses.replace(ref, lr=lr) for lr in rates]) or ref
    if v == config.pretrain.init_variant:
      init = _lowest(results, [dataclasses.replace(ref, init=i) for i in _inits(config)])
      best = dataclasses.replace(best, init=(init or ref).init)
    out[v] = best
  return out


def glue_sources(config, workdir: str, variants) -> dict:
  """{variant: [(pretraining seed or None, pretraining workdir)]}: what GLUE fine-tunes.
  glue.pretrain_seeds = 0: the reference run alone (None). N > 0: phase B's seeds 0..N-1
  at the reference width, each variant at its chosen rate and init, so that GLUE's
  intervals take in the pretraining seed as the verdict's do."""
  count = int(config.glue.get('pretrain_seeds', 0))
  if not count:
    return {v: [(None, study_plan.pretrain_dir(workdir, v))] for v in variants}
  if count > int(config.pretrain.seeds):
    raise UserError(f'glue.pretrain_seeds={count} exceeds pretrain.seeds='
                    f'{config.pretrain.seeds}: GLUE fine-tunes phase B\'s seeds')
  chosen = choose(config, variants, load_results(config, workdir, variants))
  return {v: [(s, run_dir(config, workdir, dataclasses.replace(chosen[v], seed=s)))
              for s in range(count)] for v in variants}


def step0_shares(config, workdir: str, variants) -> dict:
  """Each variant's (and each init's of the init variant) mean attention of a token on itself
  at initialisation, on one held-out batch: {name: share}. Cached in W/pretrain_runs/."""
  path = os.path.join(workdir, RUNS_DIR, STEP0_FILE)
  cached = _load_done(path) or {}
  names = list(variants)
  if config.pretrain.init_variant in variants:
    names += [f'{config.pretrain.init_variant}/{i}' for i in _inits(config)]
  if all(n in cached for n in names):
    return cached
  vocab = os.path.join(study_plan.pretrain_dir(workdir, variants[0]), tokenizer_lib.VOCAB_FILE)
  batch = PretrainData(study_plan.pretrain_config(config, variants[0]), vocab).eval_batches[0]
  ids, seg, mask = (jnp.asarray(batch[k]) for k in ('input_ids', 'segment_ids', 'input_mask'))
  for name in names:
    variant, _, init = name.partition('/')
    run = reference(config, variant)
    if init:
      run = dataclasses.replace(run, init=init)
    model_cfg = bert_lib.ModelConfig.from_config(run_config(config, run).model)
    init_rng, _ = jax.random.split(jax.random.key(run.seed))
    params = bert_lib.BertForPretraining(model_cfg).init(
        init_rng, ids, seg, mask, jnp.zeros((ids.shape[0], 1), jnp.int32))['params']
    cached[name] = float(np.mean(attention_stats.self_attention_shares(
        model_cfg, nn.unbox(params), ids, seg, mask)))
  jsonio.write_json(path, cached)
  return cached


def _inits(config) -> list[str]:
  """The init variant's reference init, then the other inits of pretrain.inits."""
  ref = reference(config, config.pretrain.init_variant).init
  return list(dict.fromkeys([ref, *(str(i) for i in config.pretrain.inits)]))


def run_all(config, workdir: str, variants) -> dict:
  """Both phases; returns {run: summary}."""
  a = phase_a(config, variants)
  _prepare_vocab(config, workdir, variants, a)
  step0_shares(config, workdir, variants)
  progress = {'done': 0, 'timed': 0, 'seconds': 0.0, 'counted': set(),
              # Phase B's size is known before its rates are: the seeds and widths.
              'total': len(a) + len(variants) * int(config.pretrain.seeds)
                       + len(scaling_variants(config, variants)) * len(config.pretrain.widths)
                       * int(config.pretrain.width_seeds)}
  results = execute(config, workdir, a, progress=progress)
  chosen = choose(config, variants, results)
  for v, run in chosen.items():
    logging.info('study: %s: phase B at lr %g, init %s', v, run.lr, run.init)
  b = phase_b(config, variants, chosen)
  progress['total'] = len(set(a) | set(b))
  _prepare_vocab(config, workdir, variants, b)
  results.update(execute(config, workdir, b, progress=progress))
  return results


# ---------------------------------------------------------------------------------------
# Analysis (from the result files alone).

def load_results(config, workdir: str, variants) -> dict:
  """{run: summary} of every finished run of both phases."""
  a = phase_a(config, variants)
  results = {r: s for r in a
             if (s := _load_done(os.path.join(run_dir(config, workdir, r),
                                              study_plan.DONE_FILE))) is not None}
  for r in phase_b(config, variants, choose(config, variants, results)):
    s = _load_done(os.path.join(run_dir(config, workdir, r), study_plan.DONE_FILE))
    if s is not None:
      results[r] = s
  return results


def _loss_at_flops(summary: dict, flops: float) -> float | None:
  """A run's held-out loss at `flops` training FLOPs, linear between its evaluations."""
  curve = summary.get('eval_curve') or []
  if not curve:
    return None
  x = np.asarray([s * summary['train_step_flops'] for s, _ in curve], np.float64)
  y = np.asarray([l for _, l in curve], np.float64)
  if flops < x[0] or flops > x[-1]:
    return None
  return float(np.interp(flops, x, y))


def analyse(config, workdir: str, variants) -> dict:
  """The pretraining part of W/summary.json: verdict, sweep, init, step-0 shares, scaling,
  equal compute."""
  p = config.pretrain
  results = load_results(config, workdir, variants)
  chosen = choose(config, variants, results)
  margin, alpha = float(p.margin_nats), float(p.alpha)
  seeds = list(range(int(p.seeds)))
  loss = lambda run: results.get(run, {}).get('eval_loss')

  def at(v, **kw):
    return dataclasses.replace(chosen[v], **kw)

  per_seed = {v: {s: loss(at(v, seed=s)) for s in seeds} for v in variants}
  per_seed = {v: {s: x for s, x in d.items() if x is not None} for v, d in per_seed.items()}
  out = {'margin_nats': margin, 'alpha': alpha, 'init_variant': str(p.init_variant),
         # The init only for the variant with diagonals (the others' is a default they ignore).
         'chosen': {v: {'lr': r.lr, **({'init': r.init} if v == p.init_variant else {})}
                    for v, r in chosen.items()},
         'multiple_comparisons': f'Holm over the {max(len(variants) - 1, 0)} variants '
                                 f'compared with {VERDICT_BASE}, each question (difference, '
                                 'equivalence) its own family',
         'losses_by_seed': {v: {str(s): x for s, x in d.items()} for v, d in per_seed.items()}}
  base = VERDICT_BASE if VERDICT_BASE in variants else None
  diffs = {}
  if base:
    for v in variants:
      if v == base:
        continue
      common = [s for s in seeds if s in per_seed[v] and s in per_seed[base]]
      if len(common) >= 2:
        diffs[v] = [per_seed[v][s] - per_seed[base][s] for s in common]
  out['verdict'] = stats.family_verdicts(diffs, margin, alpha) if diffs else {}
  tokens = [results[r].get('eval_masked_tokens') for r in results]
  out['scored_tokens'] = max((t for t in tokens if t), default=None)
  out['lr_sweep'] = {}
  for v in variants:
    ref = reference(config, v)
    rates = sorted({ref.lr, *(float(x) for x in p.lrs)})
    out['lr_sweep'][v] = {f'{lr:g}': loss(dataclasses.replace(ref, lr=lr)) for lr in rates
                          if loss(dataclasses.replace(ref, lr=lr)) is not None}
  shares = _load_done(os.path.join(workdir, RUNS_DIR, STEP0_FILE)) or {}
  out['self_attention_share_step0'] = {v: shares[v] for v in variants if v in shares}
  out['init'] = {}
  if p.init_variant in variants:
    ref = reference(config, p.init_variant)
    for name in _inits(config):
      s = results.get(dataclasses.replace(ref, init=name))
      out['init'][name] = {
          'self_attention_share_step0': shares.get(f'{p.init_variant}/{name}'),
          'final_loss': s.get('eval_loss') if s else None, 'lr': ref.lr, 'seed': ref.seed}
  out['reference'] = {v: results.get(reference(config, v)) for v in variants}
  out['equal_flops'] = _equal_flops(results, variants, seeds, at, base)
  return {'pretraining': out, 'scaling': _scaling(config, results, variants, chosen)}


def _equal_flops(results, variants, seeds, at, base) -> dict:
  """Each variant against `standard` at the smaller of their two training budgets: the
  final loss of the one that did less work against the other's loss when it had done as
  much (read from its held-out curve, mid-schedule: that favours the cheaper variant)."""
  out = {}
  if not base:
    return out
  for v in variants:
    if v == base:
      continue
    diffs, budget = [], None
    for s in seeds:
      a, b = results.get(at(v, seed=s)), results.get(at(base, seed=s))
      if not a or not b or a.get('eval_loss') is None or b.get('eval_loss') is None:
        continue
      budget = min(a['train_flops'], b['train_flops'])
      la = a['eval_loss'] if a['train_flops'] <= b['train_flops'] else _loss_at_flops(a, budget)
      lb = b['eval_loss'] if b['train_flops'] <= a['train_flops'] else _loss_at_flops(b, budget)
      if la is not None and lb is not None:
        diffs.append(la - lb)
    if diffs:
      low, high = stats.t_interval(diffs, 0.95)
      out[v] = {'train_flops': budget, 'delta_nats': float(np.mean(diffs)), 'ci_low': low,
                'ci_high': high, 'seeds': len(diffs),
                'flops_per_step_ratio': results[at(v, seed=seeds[0])]['train_step_flops']
                / results[at(base, seed=seeds[0])]['train_step_flops']
                if at(v, seed=seeds[0]) in results and at(base, seed=seeds[0]) in results
                else None}
  return out


def _scaling(config, results, variants, chosen) -> dict:
  """scaling.<variant>.<width>: the mean held-out loss over seeds 0..width_seeds-1 at the
  variant's best rate, with parameters and FLOPs; and the gap to standard per width."""
  out = {}
  n = int(config.pretrain.width_seeds)
  for v in scaling_variants(config, variants):
    ref = chosen[v]
    out[v] = {}
    for w in widths(config, variants):
      runs = [results.get(dataclasses.replace(ref, width=w, seed=s)) for s in range(n)]
      runs = [r for r in runs if r and r.get('eval_loss') is not None]
      if not runs:
        continue
      out[v][str(w)] = {'loss_mean': float(np.mean([r['eval_loss'] for r in runs])),
                        'losses': [r['eval_loss'] for r in runs], 'seeds': len(runs),
                        'non_embedding_params': runs[0]['non_embedding_params'],
                        'train_flops': runs[0]['train_flops']}
  gaps = {}
  if VERDICT_BASE in out:
    for v in out:
      if v == VERDICT_BASE:
        continue
      gaps[v] = {}
      for w, e in out[v].items():
        b = out[VERDICT_BASE].get(w)
        if not b:
          continue
        d = [x - y for x, y in zip(e['losses'], b['losses'])]
        low, high = stats.t_interval(d, 0.95)
        gaps[v][w] = {'delta_nats': float(np.mean(d)), 'ci_low': low, 'ci_high': high,
                      'seeds': len(d)}
  out['gap_to_standard'] = gaps
  out['extrapolation'] = {v: extrapolate(g) for v, g in gaps.items()}
  return out


def extrapolate(gaps: dict, target_width: int = 768) -> dict | None:
  """A straight line of the per-seed gap against log2(width), read at `target_width`, with a
  95% prediction-style t interval of the line's value there (residual df = points - 2)."""
  xs, ys = [], []
  for w, g in gaps.items():
    # Each seed's gap is a point; the mean stands for them when only it is kept.
    xs.append(math.log2(int(w)))
    ys.append(g['delta_nats'])
  if len(xs) < 3:
    return None
  x, y = np.asarray(xs), np.asarray(ys)
  slope, intercept = np.polyfit(x, y, 1)
  x0 = math.log2(target_width)
  resid = y - (slope * x + intercept)
  dof = len(x) - 2
  s = math.sqrt(float(resid @ resid) / dof) if dof > 0 else float('nan')
  se = s * math.sqrt(1 / len(x) + (x0 - x.mean()) ** 2 / float(((x - x.mean()) ** 2).sum()))
  half = float(sp_stats.t.ppf(0.975, dof)) * se if dof > 0 else float('nan')
  value = float(slope * x0 + intercept)
  return {'target_width': target_width, 'slope_per_doubling': float(slope), 'value': value,
          'ci_low': value - half, 'ci_high': value + half, 'points': len(x)}
