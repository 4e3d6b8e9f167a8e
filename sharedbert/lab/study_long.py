"""The long study (configs/study.py:cpu_long, gpu_long): the verdict past the first steps,
and why. Pretraining only.

Three arms, each a set of pretraining runs (`LongRun`: variant, steps, peak lr, seed, diag
init), every run with its own full schedule (warmup, then decay to its own last step):

  horizon    `long.horizon_variants` (standard and shared) at every step count of
             `long.horizons`: the gap against tokens seen.
  factorial  `long.factorial_variants` at `long.factorial_steps`: each scheme that ties
             Q, K, V differently, so that the gap splits into effects (EFFECTS).
  equal FLOPs  standard for the step count whose training FLOPs equal each variant of
             `long.equal_flops_variants` at the factorial horizon, at standard's rate there.

Selection is apart from the verdict: at every (variant, steps) the rates of `long.lrs`
(and, for `long.init_variant`, the inits of `long.inits`, jointly) run on
`long.selection_seed`, which no verdict uses; a best rate at an edge of the grid adds the
next rate out (x2 or /2) up to `long.max_widen` times. The verdict seeds 0..seeds-1 (the
longest horizon: 0..longest_seeds-1) then run at the chosen rate and init. The plan grows
as results arrive (`plan`), `pretrain.workers` runs at a time, shortest first; a killed
study resumes every run from its checkpoint and skips finished ones (study_done.json).
"""

from __future__ import annotations

import copy
import dataclasses
import glob
import math
import os
import time

from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from sharedbert.errors import UserError
from sharedbert.metrics import stats
from sharedbert.utils import jsonio
from sharedbert.utils import reporting
from sharedbert.utils import workers as workers_lib
from sharedbert import train as train_lib
from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.data.pretrain import PretrainData, max_predictions
from sharedbert.lab import seed_stats
from sharedbert.lab import study_plan
from sharedbert.lab import study_pretrain
from sharedbert import pretrain_step
from sharedbert import runs as restore_lib
from sharedbert.models import attention as attention_lib
from sharedbert.lab import attention_stats
from sharedbert.models import bert as bert_lib
from sharedbert.models import flops as flops_lib
from sharedbert.models.bert import ModelConfig

RUNS_DIR = 'runs'
VOCAB_DIR = 'vocab'
# Attention statistics of the factorial's runs, at init and trained (attention_statistics_of_runs).
ATTENTION_FILE = 'attention_statistics.json'
BASE = 'standard'
# The init field of a variant without diagonals (its config's init is never read).
NO_INIT = 'na'
# The factorial's effects: (name, variant, minus this variant, what it isolates).
EFFECTS = (
    ('tie_qk', 'symmetric', 'standard', 'tying Q and K (Q = K)'),
    ('tie_kv', 'kv_shared', 'standard', 'tying K and V (K = V)'),
    ('tie_qkv', 'single', 'standard', 'tying all three (Q = K = V)'),
    ('diagonals', 'shared', 'single', "shared's three diagonals on Q = K = V"),
    ('asymmetry', 'pairwise', 'symmetric', 'restoring asymmetry (P_h on Q = K)'),
)


@dataclasses.dataclass(frozen=True, order=True)
class LongRun:
  variant: str
  steps: int
  lr: float
  seed: int
  init: str

  @property
  def tag(self) -> str:
    return f's{self.steps}_lr{self.lr:g}_seed{self.seed}_{self.init}'

  def describe(self) -> str:
    return (f'{self.variant} {self.steps} steps lr {self.lr:g} seed {self.seed}'
            + (f' init {self.init}' if self.init != NO_INIT else ''))


def attention_variants() -> list[str]:
  return list(attention_lib.VARIANTS)


def run_dir(workdir: str, run: LongRun) -> str:
  return os.path.join(workdir, RUNS_DIR, run.variant, run.tag)


# ---------------------------------------------------------------------------------------
# The plan.

def verdict_seeds(config, steps: int) -> list[int]:
  n = config.long.longest_seeds if steps == max(config.long.horizons) else config.long.seeds
  return list(range(int(n)))


def sweeps(config) -> list[tuple[str, int]]:
  """Every (variant, steps) that runs a verdict, each with a sweep of its own."""
  L = config.long
  out = [(v, int(h)) for h in L.horizons for v in L.horizon_variants]
  out += [(v, int(L.factorial_steps)) for v in L.factorial_variants]
  return list(dict.fromkeys(out))


def _inits_at(config, variant: str, steps: int, results: dict):
  """The inits swept at (variant, steps), or (None, runs still needed) while they depend on
  another sweep: past `long.init_sweep_max_steps` the init variant takes the init chosen
  at the longest horizon at or below it."""
  L = config.long
  if variant != L.init_variant:
    return [NO_INIT], []
  if steps <= int(L.init_sweep_max_steps):
    return [str(i) for i in L.inits], []
  below = [s for v, s in sweeps(config) if v == variant and s <= int(L.init_sweep_max_steps)]
  if not below:
    raise UserError(f'long.init_sweep_max_steps={L.init_sweep_max_steps}: no sweep of '
                    f'{variant} at or below it chooses its init')
  best, needed = settle(config, results, variant, max(below))
  return ([best.init], []) if best else (None, needed)


def settle(config, results: dict, variant: str, steps: int):
  """(the chosen run template, []) once the sweep at (variant, steps) is finished and
  bracketed, else (None, the selection runs it still needs). Lowest final held-out loss
  wins; a run that diverged counts as worst."""
  L = config.long
  inits, needed = _inits_at(config, variant, steps, results)
  if inits is None:
    return None, needed
  sel = int(L.selection_seed)
  if len(L.lrs) == 1 and len(inits) == 1:  # Nothing to choose: no selection runs.
    return LongRun(variant, steps, float(L.lrs[0]), sel, inits[0]), []
  grid = [LongRun(variant, steps, float(lr), sel, i) for lr in sorted(L.lrs) for i in inits]
  for _ in range(int(L.max_widen) + 1):
    missing = [r for r in grid if r not in results]
    if missing:
      return None, missing
    best = min(grid, key=lambda r: final_loss(results[r]))
    if not math.isfinite(final_loss(results[best])):
      raise UserError(f'every selection run of {variant} at {steps} steps diverged; '
                      'lower long.lrs')
    rates = sorted({r.lr for r in grid})
    if len(rates) < 2 or best.lr not in (rates[0], rates[-1]):
      return best, []
    out = best.lr / 2 if best.lr == rates[0] else best.lr * 2
    if sum(1 for r in grid if r.init == best.init) - len(L.lrs) >= int(L.max_widen):
      return best, []
    grid = grid + [dataclasses.replace(best, lr=out)]
  return best, []


def final_loss(summary: dict) -> float:
  x = summary.get('eval_loss')
  return float(x) if x is not None and math.isfinite(x) else math.inf


def equal_flops_steps(config, variant: str) -> int:
  """Standard's step count whose training FLOPs equal `variant`'s at the factorial horizon."""
  F = int(config.long.factorial_steps)
  ratio = step_flops(config, variant) / step_flops(config, BASE)
  return max(1, int(round(F * ratio)))


def step_flops(config, variant: str) -> int:
  cfg = study_plan.pretrain_config(config, variant)
  d = cfg.data
  return int(flops_lib.train_step_flops(ModelConfig.from_config(cfg.model), d.batch_size,
                                        d.seq_len, d.batch_size * max_predictions(d)))


def plan(config, results: dict) -> tuple[list[LongRun], dict, int]:
  """(runs that may start now, unfinished, shortest first; {(variant, steps): chosen run};
  the number of runs still to do, including those that wait on a sweep)."""
  ready, chosen, waiting = [], {}, 0
  for v, steps in sweeps(config):
    best, needed = settle(config, results, v, steps)
    ready += needed
    if best is None:
      waiting += len(verdict_seeds(config, steps))
      continue
    chosen[(v, steps)] = best
    ready += [dataclasses.replace(best, seed=s) for s in verdict_seeds(config, steps)]
  base = chosen.get((BASE, int(config.long.factorial_steps)))
  for v in config.long.equal_flops_variants:
    if base is None:
      waiting += len(verdict_seeds(config, int(config.long.factorial_steps)))
      continue
    ready += equal_flops_runs(config, v, base)
  ready = [r for r in dict.fromkeys(ready) if r not in results]
  ready.sort(key=lambda r: (r.steps, r.seed != int(config.long.selection_seed), r))
  return ready, chosen, len(ready) + waiting


def equal_flops_runs(config, variant: str, base_template: LongRun) -> list[LongRun]:
  steps = equal_flops_steps(config, variant)
  return [dataclasses.replace(base_template, steps=steps, seed=s)
          for s in verdict_seeds(config, int(config.long.factorial_steps))]


def run_config(config, run: LongRun):
  """The run's pretraining config: the study's recipe with the run's steps, rate, seed and
  init; held-out evaluations `long.evals_per_run` times along the run."""
  override = ml_collections.ConfigDict(copy.deepcopy(config.pretrain.override.to_dict()))
  for group in ('optim', 'model', 'ckpt'):
    if group not in override:
      override[group] = ml_collections.ConfigDict()
  override.total_steps = run.steps
  override.optim.lr = run.lr
  override.seed = run.seed
  if run.init != NO_INIT:
    override.model.diag_init_scheme = run.init
  override.eval_every_steps = max(1, run.steps // int(config.long.evals_per_run))
  override.ckpt.every_steps = min(run.steps, int(config.long.checkpoint_every_steps))
  return study_plan.pretrain_config(config, run.variant, override=override)


def every_run(config) -> list[LongRun]:
  """Every run the plan could ask for before any result (the static part): for checks."""
  L = config.long
  out = []
  for v, steps in sweeps(config):
    inits = [str(i) for i in L.inits] if v == L.init_variant else [NO_INIT]
    lr = float(sorted(L.lrs)[0])
    out += [LongRun(v, steps, float(x), int(L.selection_seed), i) for x in L.lrs for i in inits]
    out += [LongRun(v, steps, lr, s, inits[0]) for s in verdict_seeds(config, steps)]
  for v in L.equal_flops_variants:
    out += equal_flops_runs(config, v, LongRun(BASE, int(L.factorial_steps),
                                               float(L.lrs[0]), 0, NO_INIT))
  return list(dict.fromkeys(out))


# ---------------------------------------------------------------------------------------
# Running.

def _train_one(cfg, run_dir_: str) -> dict:
  """Trains one run (resuming it) and writes its study_done.json; in any process. A run
  that diverges is finished too: its loss counts as the worst in a sweep."""
  import tensorflow as tf
  tf.io.gfile.makedirs(run_dir_)
  t0 = time.time()
  try:
    train_lib.train_and_evaluate(cfg, run_dir_)
    summary = study_pretrain.run_summary(cfg, run_dir_, time.time() - t0)
  except train_lib.Diverged as e:
    summary = {'diverged': str(e), 'eval_loss': None, 'wall_s': round(time.time() - t0, 1)}
  summary.update(variant=str(cfg.model.attention), total_steps=int(cfg.total_steps),
                 lr=float(cfg.optim.lr), seed=int(cfg.seed), **reporting.machine_load())
  jsonio.write_json(os.path.join(run_dir_, study_plan.DONE_FILE), summary)
  return summary


def load_results(workdir: str) -> dict:
  """{LongRun: summary} of every finished run under W/runs/ (read from the folder names)."""
  out = {}
  for path in sorted(glob.glob(os.path.join(workdir, RUNS_DIR, '*', '*', study_plan.DONE_FILE))):
    folder = os.path.dirname(path)
    variant = os.path.basename(os.path.dirname(folder))
    run = parse_tag(variant, os.path.basename(folder))
    if run is not None:
      out[run] = jsonio.read_json(path)
  return out


def parse_tag(variant: str, tag: str) -> LongRun | None:
  try:
    steps, lr, seed, init = tag.split('_', 3)
    return LongRun(variant, int(steps[1:]), float(lr[2:]), int(seed[4:]), init)
  except ValueError:
    return None


def prepare_vocab(config, workdir: str, run: LongRun | None) -> None:
  """The study's one vocabulary, learned once in W/vocab/ and copied into `run`'s folder,
  so that every run sees the same token ids."""
  import tensorflow as tf
  vocab = os.path.join(workdir, VOCAB_DIR, tokenizer_lib.VOCAB_FILE)
  if not tf.io.gfile.exists(vocab):
    tf.io.gfile.makedirs(os.path.dirname(vocab))
    PretrainData(study_plan.pretrain_config(config, BASE), vocab)
  if run is None:
    return
  target = os.path.join(run_dir(workdir, run), tokenizer_lib.VOCAB_FILE)
  if not tf.io.gfile.exists(target):
    tf.io.gfile.makedirs(os.path.dirname(target))
    tf.io.gfile.copy(vocab, target)


ATTENTION_KEYS = ('self_share', 'top_weight', 'logit_sd')


def attention_statistics_of_runs(config, workdir: str) -> dict:
  """attention_stats.attention_statistics of every factorial verdict run at the factorial horizon, on
  the first held-out batch: of its initial weights (the init key train.py derives from its
  seed) and, once it is finished, of its final checkpoint. Where each scheme starts (Q = K
  puts weight on the token itself; pairwise's P_h ~ N(0, 1) starts with large scores) and
  where training took it. Cached per run in W/runs/attention_statistics.json (written after
  each run, so a kill keeps what was done); returns the cache."""
  path = os.path.join(workdir, RUNS_DIR, ATTENTION_FILE)
  cache = jsonio.read_json(path) if os.path.isfile(path) else {}
  results = load_results(workdir)
  todo = []
  for run in _attention_runs(config, plan(config, results)[1]):
    entry = cache.get(f'{run.variant}/{run.tag}', {})
    finished = run in results and os.path.isdir(os.path.join(run_dir(workdir, run), 'checkpoints'))
    if 'init' not in entry or ('trained' not in entry and finished):
      todo.append((run, finished))
  vocab = os.path.join(workdir, VOCAB_DIR, tokenizer_lib.VOCAB_FILE)
  if not todo or not os.path.isfile(vocab):
    return cache
  batch = PretrainData(study_plan.pretrain_config(config, BASE), vocab).eval_batches[0]
  ids, seg, mask = (jnp.asarray(batch[k]) for k in ('input_ids', 'segment_ids', 'input_mask'))
  for run, finished in todo:
    entry = cache.setdefault(f'{run.variant}/{run.tag}', {
        'rows': int(ids.shape[0]), 'tokens_per_row': float(np.mean(np.asarray(mask).sum(-1)))})
    model_cfg = ModelConfig.from_config(run_config(config, run).model)
    if 'init' not in entry:
      init_rng, _ = jax.random.split(jax.random.key(run.seed))
      params = nn.unbox(pretrain_step.init_params(bert_lib.BertForPretraining(model_cfg),
                                                  init_rng))
      entry['init'] = attention_stats.attention_statistics(model_cfg, params, ids, seg, mask)
    if finished and 'trained' not in entry:
      restored = restore_lib.restore(run_dir(workdir, run), devices=jax.devices()[:1])
      if restored.step == run.steps:  # Its final weights, not a mid-run checkpoint.
        entry['trained'] = attention_stats.attention_statistics(model_cfg, restored.params, ids, seg,
                                                         mask)
    jsonio.write_json(path, cache)
  return cache


def _attention_runs(config, chosen: dict) -> list[LongRun]:
  F = int(config.long.factorial_steps)
  return [dataclasses.replace(chosen[(v, F)], seed=s) for v in config.long.factorial_variants
          if (v, F) in chosen for s in verdict_seeds(config, F)]


def attention_summary(config, chosen: dict, workdir: str) -> dict:
  """summary.json's `attention`: per factorial variant, the mean over its seeds and layers of
  each statistic, at init and trained, with the seeds each covers and the per-layer values."""
  path = os.path.join(workdir, RUNS_DIR, ATTENTION_FILE)
  cache = jsonio.read_json(path) if os.path.isfile(path) else {}
  out = {}
  for run in _attention_runs(config, chosen):
    entry = cache.get(f'{run.variant}/{run.tag}')
    if not entry:
      continue
    v = out.setdefault(run.variant, {'rows': entry['rows'],
                                     'tokens_per_row': entry['tokens_per_row']})
    for when in ('init', 'trained'):
      if when in entry:
        v.setdefault(when, {'per_seed': {}})['per_seed'][str(run.seed)] = entry[when]
  for v in out.values():
    for when in ('init', 'trained'):
      if when in v:
        layers = list(v[when]['per_seed'].values())
        v[when].update({k: float(np.mean([[l[k] for l in ls] for ls in layers]))
                        for k in ATTENTION_KEYS}, seeds=sorted(int(s) for s in v[when]['per_seed']))
  return out


def eta_minutes(rates: list[float], steps_left: int, workers: int) -> float:
  """Minutes left at the median seconds a step of the runs so far (a median: a run that
  was paused, SIGSTOP while the machine did other work, would inflate a mean), `workers`
  runs at a time."""
  return float(np.median(rates)) * steps_left / max(1, workers) / 60


def run_all(config, workdir: str, *, plan_fn=None, config_fn=None, on_finished=None) -> dict:
  """Runs (or resumes) the whole plan; returns {run: summary}. `plan_fn(config, results)`
  and `config_fn(config, run)` default to this study's `plan` and `run_config`; another
  design over LongRuns (study_rotary.py) passes its own. `on_finished(run, summary)` is
  called as each run finishes (study_archive keeps it)."""
  plan_fn = plan_fn or plan
  config_fn = config_fn or run_config
  results = load_results(workdir)
  rates = []  # Seconds a step of each run trained from scratch here.
  workers = max(1, int(config.pretrain.workers))
  _, _, left = plan_fn(config, results)
  logging.info('study: %d runs finished, about %d to do (the plan grows with the sweeps), '
               '%d at a time', len(results), left, workers)

  def next_jobs():
    return plan_fn(config, results)[0]

  resumed = set()  # Runs that started from a checkpoint: left out of the ETA's rate.

  def args_of(run):
    if os.path.isdir(os.path.join(run_dir(workdir, run), 'checkpoints')):
      resumed.add(run)
    prepare_vocab(config, workdir, run)
    logging.info('study: pretraining %s in %s', run.describe(), run_dir(workdir, run))
    return config_fn(config, run), run_dir(workdir, run)

  def finished(run, summary):
    results[run] = summary
    if on_finished is not None:
      on_finished(run, summary)
    if run not in resumed:
      rates.append(summary['wall_s'] / run.steps)
    todo, _, count = plan_fn(config, results)
    # Runs waiting on a sweep are counted at this run's length.
    steps_left = sum(r.steps for r in todo) + max(0, count - len(todo)) * run.steps
    eta = (f'ETA about {eta_minutes(rates, steps_left, workers):.0f} min' if rates
           else 'ETA after the first run trained from scratch')
    logging.info('study: %d runs done, about %d to go: %s: held-out loss %s in %.0fs; %s',
                 len(results), count, run.describe(),
                 f"{summary['eval_loss']:.4f}" if summary.get('eval_loss') is not None
                 else 'diverged', summary['wall_s'], eta)

  workers_lib.run_growing(next_jobs, _train_one, args_of, workers=workers, on_done=finished,
                          describe=lambda run: f'study: pretraining {run.describe()} in '
                                               f'{run_dir(workdir, run)}')
  return results


# ---------------------------------------------------------------------------------------
# Analysis (from the result files alone).











def analyse(config, workdir: str) -> dict:
  """summary.json of the long study: horizon, factorial, equal_flops, equivalence,
  selection (the keys issue 42 names, and more)."""
  L = config.long
  results = load_results(workdir)
  _, chosen, left = plan(config, results)
  margin, alpha = float(config.pretrain.margin_nats), float(config.pretrain.alpha)

  def losses(template: LongRun, steps: int) -> dict:
    out = {}
    for s in verdict_seeds(config, template.steps):
      r = results.get(dataclasses.replace(template, steps=steps, seed=s))
      if r is not None and r.get('eval_loss') is not None:
        out[s] = float(r['eval_loss'])
    return out

  out = {'design': 'long', 'selection_seed': int(L.selection_seed), 'margin_nats': margin,
         'alpha': alpha, 'tokens_per_step': tokens_per_step(config), 'runs_finished': len(results),
         'runs_left': left}
  horizon, gap_points = {}, []
  for v in L.horizon_variants:
    horizon[v] = {}
    for h in L.horizons:
      best = chosen.get((v, int(h)))
      if best is None:
        continue
      by_seed = losses(best, int(h))
      if by_seed:
        horizon[v][str(h)] = {'loss_mean': float(np.mean(list(by_seed.values()))),
                              'seeds': sorted(by_seed), 'lr': best.lr,
                              'losses': [by_seed[s] for s in sorted(by_seed)],
                              **({'init': best.init} if best.init != NO_INIT else {})}
  gaps = {}
  for h in L.horizons:
    a, b = (chosen.get((v, int(h))) for v in ('shared', BASE))
    if a is None or b is None or 'shared' not in L.horizon_variants:
      continue
    d = seed_stats.paired(losses(a, int(h)), losses(b, int(h)))
    if len(d) >= 2:
      gaps[str(h)] = {**seed_stats.difference(d), 'tokens': int(h) * out['tokens_per_step']}
      gap_points += [(int(h) * out['tokens_per_step'], x) for x in d.values()]
  horizon['gap'] = gaps
  horizon.update(seed_stats.horizon_shape(gaps))
  out['horizon'] = horizon

  F = int(L.factorial_steps)
  fact_losses = {v: losses(chosen[(v, F)], F) for v in L.factorial_variants if (v, F) in chosen}
  fact = {}
  diffs = {v: seed_stats.paired(fact_losses[v], fact_losses[BASE]) for v in fact_losses
           if v != BASE and BASE in fact_losses}
  diffs = {v: d for v, d in diffs.items() if len(d) >= 2}
  verdicts = stats.family_verdicts({v: list(d.values()) for v, d in diffs.items()},
                                   margin, alpha) if diffs else {}
  for v in fact_losses:
    entry = {'lr': chosen[(v, F)].lr, 'seeds': sorted(fact_losses[v]),
             'loss_mean': float(np.mean(list(fact_losses[v].values()))) if fact_losses[v] else None}
    if chosen[(v, F)].init != NO_INIT:
      entry['init'] = chosen[(v, F)].init
    if v in verdicts:
      entry.update({k: x for k, x in verdicts[v].items() if k != 'seeds'})
    fact[v] = entry
  effects = {}
  for name, a, b, what in EFFECTS:
    if a in fact_losses and b in fact_losses:
      d = seed_stats.paired(fact_losses[a], fact_losses[b])
      if len(d) >= 2:
        effects[name] = {**seed_stats.difference(d), 'what': what, 'minuend': a, 'subtrahend': b}
  effects.update(seed_stats.derived_effects(effects))
  fact['effects'] = effects
  fact['steps'] = F
  out['factorial'] = fact

  eq = {}
  base = chosen.get((BASE, F))
  for v in L.equal_flops_variants:
    if base is None or (v, F) not in chosen:
      continue
    steps = equal_flops_steps(config, v)
    base_losses = {}
    for r in equal_flops_runs(config, v, base):
      s = results.get(r)
      if s is not None and s.get('eval_loss') is not None:
        base_losses[r.seed] = float(s['eval_loss'])
    d = seed_stats.paired(fact_losses.get(v, {}), base_losses)
    if len(d) < 2:
      continue
    v_runs = [results[dataclasses.replace(chosen[(v, F)], seed=s)] for s in fact_losses[v]]
    b_runs = [results[dataclasses.replace(base, steps=steps, seed=s)] for s in base_losses]
    eq[v] = {**seed_stats.difference(d), 'standard_steps': steps, 'variant_steps': F,
             'standard_lr': base.lr,
             'flops_ratio': step_flops(config, v) / step_flops(config, BASE),
             'step_time_variant_s': _median([r.get('step_time_median') for r in v_runs]),
             'step_time_standard_s': _median([r.get('step_time_median') for r in b_runs])}
  out['equal_flops'] = eq

  family = {f'{v} - standard @ {F}': list(d.values()) for v, d in diffs.items()}
  horizons = {}
  for h in L.horizons:
    name = f'shared - standard @ {h}'
    if name not in family and ('shared', int(h)) in chosen and (BASE, int(h)) in chosen:
      horizons[name] = list(seed_stats.paired(losses(chosen[('shared', int(h))], int(h)),
                                              losses(chosen[(BASE, int(h))], int(h))).values())
  equivalence = seed_stats.equivalence_table(family, horizons, margin, alpha)
  out['equivalence'] = equivalence

  selection = {}
  for v, steps in sweeps(config):
    grid = {r: s for r, s in results.items() if r.variant == v and r.steps == steps
            and r.seed == int(L.selection_seed)}
    if not grid:
      continue
    best = chosen.get((v, steps))
    selection[f'{v}@{steps}'] = {
        'losses': {f'{r.lr:g}' + (f'/{r.init}' if r.init != NO_INIT else ''):
                   (s.get('eval_loss') if s.get('eval_loss') is not None else 'diverged')
                   for r, s in sorted(grid.items())},
        'chosen': ({'lr': best.lr, **({'init': best.init} if best.init != NO_INIT else {})}
                   if best else None),
        **seed_stats.bracket({r.lr: final_loss(x) for r, x in grid.items()
                   if best is None or r.init == best.init},
                  best.lr if best else None, float(L.plateau_nats))}
  out['selection'] = selection
  out['curves'] = {f'{r.variant}@{r.steps}/seed{r.seed}': s.get('eval_curve')
                   for r, s in sorted(results.items())
                   if r.seed != int(L.selection_seed) and s.get('eval_curve')}
  out['wall_s'] = round(sum(s.get('wall_s', 0.0) for s in results.values()), 1)
  out['attention'] = attention_summary(config, chosen, workdir)
  return out










def tokens_per_step(config) -> int:
  cfg = study_plan.pretrain_config(config, BASE)
  return int(cfg.data.batch_size * cfg.data.seq_len)


def _median(values):
  values = [v for v in values if v is not None]
  return float(np.median(values)) if values else None
