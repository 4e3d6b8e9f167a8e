"""The rotary study (configs/study.py:cpu_rotary; issue 54): does rotary close `shared`'s
gap? Pretraining only, one horizon. The design and the hypotheses were written before any
run: docs/study_cpu_rotary/PREREGISTERED.md (HYPOTHESES below says the same).

An arm is a variant with its position settings, named `variant[+rotary[+phiX]]`:
`shared+rotary+phi1` is `shared` under rotary positions with query phase 1. Every arm runs
at `rotary.steps` with its own full schedule, as the long study's runs (study_long.LongRun,
whose `variant` field holds the arm; the run folders are W/runs/<arm>/<tag>/).

Selection is apart from the verdict: each arm's rates `rotary.lrs` run on every seed of
`rotary.selection_seeds` (no verdict seed); the rate with the lowest mean held-out loss
over them wins, and a best rate at an edge adds the next rate out (x2 or /2) on every
selection seed, up to `rotary.max_widen` times. Verdict seeds 0..seeds-1 (0..headline_seeds-1
for the headline's four arms) then run at the chosen rate.

Reuse: runs of the long study whose configuration is identical (`rotary.reuse_arms`, learned
positions) are read from its summary.json instead of trained, but only once one of them
(`rotary.reuse_check`) has been trained here and matches its recorded loss to
`rotary.reuse_tolerance`; otherwise nothing is reused and the report says so.
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from sharedbert.errors import UserError
from sharedbert.lab import seed_stats
from sharedbert.lab import study_long
from sharedbert.lab import study_plan
from sharedbert.metrics import stats
from sharedbert.utils import jsonio
from sharedbert.utils import reporting

LongRun = study_long.LongRun
NO_INIT = study_long.NO_INIT
BASE = 'standard'
BASE_ROTARY = 'standard+rotary'

# The pre-registered hypotheses (docs/study_cpu_rotary/PREREGISTERED.md): (id, name,
# minuend arm, subtrahend arm, predicted sign of the mean difference or None, what it asks).
# H1 is the interaction, judged alone; H2-H7 are one Holm family.
HEADLINE = ('H1', 'interaction', 'rotary narrows shared\'s gap: '
            '(shared+rotary - standard+rotary) - (shared - standard) < 0')
HYPOTHESES = (
    ('H2', 'rotary_on_shared', 'shared+rotary', 'shared', -1, 'rotary on shared'),
    ('H3', 'rotary_on_standard', 'standard+rotary', 'standard', None, 'rotary on standard'),
    ('H4', 'phi_on_symmetric', 'symmetric+rotary+phi1', 'symmetric+rotary', -1,
     'the query phase on symmetric (Q = K) under rotary'),
    ('H5', 'score_symmetry', 'shared_qk', 'standard', +1,
     'symmetric but indefinite scores (shared_qk) against standard'),
    ('H6', 'self_favouring', 'symmetric', 'shared_qk', +1,
     'Q = K, positive semi-definite scores, against shared_qk'),
    ('H7', 'v_tie', 'shared', 'shared_qk', None, 'tying V to the shared projection'),
)
# The same contrasts under rotary, and the phase on shared: reported, not tested.
DESCRIPTIVE = (
    ('score_symmetry_rotary', 'shared_qk+rotary', 'standard+rotary'),
    ('self_favouring_rotary', 'symmetric+rotary', 'shared_qk+rotary'),
    ('v_tie_rotary', 'shared+rotary', 'shared_qk+rotary'),
    ('phi_on_shared', 'shared+rotary+phi1', 'shared+rotary'),
)
EFFECT_SIZE = 0.2  # The interaction the design is powered for, in nats.


def parse_arm(arm: str) -> tuple[str, dict]:
  """(variant, model overrides) of an arm name `variant[+rotary[+phiX]]`."""
  variant, *parts = arm.split('+')
  model = {}
  for part in parts:
    if part == 'rotary':
      model['position_embeddings'] = 'rotary'
    elif part.startswith('phi') and 'position_embeddings' in model:
      try:
        model['rope_query_phase'] = float(part[3:])
      except ValueError:
        raise UserError(f'arm {arm!r}: {part!r} is not phi<number>') from None
    else:
      raise UserError(f'arm {arm!r}: unknown part {part!r}; an arm is '
                      'variant[+rotary[+phi<number>]]')
  return variant, model


def positions(arm: str) -> str:
  return parse_arm(arm)[1].get('position_embeddings', 'learned')


def base_of(arm: str) -> str | None:
  """The arm each factorial entry is read against: standard with the same positions
  (standard+rotary against standard)."""
  if arm == BASE:
    return None
  return BASE if positions(arm) == 'learned' or arm == BASE_ROTARY else BASE_ROTARY


def verdict_seeds(config, arm: str) -> list[int]:
  R = config.rotary
  return list(range(int(R.headline_seeds if arm in R.headline_arms else R.seeds)))


def run_config(config, run: LongRun):
  """The run's pretraining config: the long study's with the arm's position settings."""
  variant, model = parse_arm(run.variant)
  cfg = study_long.run_config(config, dataclasses.replace(run, variant=variant))
  cfg.model.update(model)
  return cfg


# ---------------------------------------------------------------------------------------
# Reuse of the long study's identical runs.

def _reuse_path(config) -> str:
  path = str(config.rotary.reuse_summary)
  if path and not os.path.isabs(path):
    path = os.path.join(os.path.dirname(study_plan.REPO_CONFIGS), path)
  return path


def check_run(config) -> LongRun | None:
  R = config.rotary
  if not R.reuse_summary:
    return None
  arm, lr, seed = R.reuse_check
  return LongRun(str(arm), int(R.steps), float(lr), int(seed), NO_INIT)


def reusable(config) -> dict:
  """{LongRun: held-out loss} recorded in the long study's summary.json for the arms of
  `rotary.reuse_arms` at `rotary.steps`: its selection seed's sweep and its verdict seeds."""
  R = config.rotary
  path = _reuse_path(config)
  if not path:
    return {}
  if not os.path.isfile(path):
    raise UserError(f'rotary.reuse_summary={R.reuse_summary}: no such file')
  long = jsonio.read_json(path)
  steps, out = int(R.steps), {}
  for arm in R.reuse_arms:
    if positions(arm) != 'learned':
      raise UserError(f'rotary.reuse_arms: {arm} is not a learned-positions arm; the long '
                      'study ran none other')
    sel = long.get('selection', {}).get(f'{arm}@{steps}', {})
    for lr, loss in sel.get('losses', {}).items():
      if '/' not in lr and isinstance(loss, float):
        out[LongRun(arm, steps, float(lr), int(long['selection_seed']), NO_INIT)] = loss
    lr = long.get('factorial', {}).get(arm, {}).get('lr')
    for key, curve in long.get('curves', {}).items():
      name, _, seed = key.partition('/seed')
      if name == f'{arm}@{steps}' and curve and curve[-1][0] == steps and lr is not None:
        out[LongRun(arm, steps, float(lr), int(seed), NO_INIT)] = float(curve[-1][1])
  return out


def reuse_status(config, results: dict) -> dict:
  """Whether the long study's runs are reused: the check run's loss here and there."""
  run = check_run(config)
  if run is None:
    return {'used': False, 'why': 'rotary.reuse_summary is empty'}
  table = reusable(config)
  if run not in table:
    raise UserError(f'rotary.reuse_check: {run.describe()} is not in {config.rotary.reuse_summary}')
  out = {'from': str(config.rotary.reuse_summary), 'check': run.describe(),
         'long_loss': table[run], 'tolerance': float(config.rotary.reuse_tolerance)}
  here = results.get(run, {}).get('eval_loss')
  if here is None:
    return {**out, 'used': False, 'why': 'the check run has not finished'}
  diff = abs(float(here) - table[run])
  used = diff <= float(config.rotary.reuse_tolerance)
  return {**out, 'here_loss': float(here), 'abs_diff': diff, 'used': used,
          'runs': len(table) - 1 if used else 0,
          **({} if used else {'why': 'the check run differs; every run is trained here'})}


def with_reuse(config, results: dict) -> dict:
  """The finished runs, with the long study's identical runs added once the check passed."""
  if not reuse_status(config, results)['used']:
    return results
  reused = {r: {'eval_loss': x, 'reused_from': str(config.rotary.reuse_summary)}
            for r, x in reusable(config).items() if r not in results}
  return {**reused, **results}


# ---------------------------------------------------------------------------------------
# The plan.

def settle(config, results: dict, arm: str):
  """(the chosen rate, []) once the arm's sweep is finished on every selection seed, else
  (None, the selection runs it still needs). The rate with the lowest mean final held-out
  loss over the selection seeds wins (a diverged run counts as the worst)."""
  R = config.rotary
  steps, seeds = int(R.steps), [int(s) for s in R.selection_seeds]
  rates = sorted(float(x) for x in R.lrs)
  widened = 0
  while True:
    grid = [LongRun(arm, steps, lr, s, NO_INIT) for lr in rates for s in seeds]
    missing = [r for r in grid if r not in results]
    if missing:
      return None, missing
    means = selection_means(config, results, arm, rates)
    best = min(rates, key=lambda lr: means[lr])
    if not math.isfinite(means[best]):
      raise UserError(f'every selection run of {arm} diverged; lower rotary.lrs')
    if len(rates) < 2 or best not in (rates[0], rates[-1]) or widened >= int(R.max_widen):
      return best, []
    rates = sorted(rates + [best / 2 if best == rates[0] else best * 2])
    widened += 1


def selection_means(config, results: dict, arm: str, rates) -> dict:
  steps = int(config.rotary.steps)
  return {lr: float(np.mean([study_long.final_loss(
      results[LongRun(arm, steps, lr, int(s), NO_INIT)]) for s in config.rotary.selection_seeds]))
      for lr in rates}


def plan(config, results: dict) -> tuple[list[LongRun], dict, int]:
  """(runs that may start now, unfinished: the reuse check first, then selection runs,
  then verdict runs; {arm: chosen run template}; the number of runs still to do, counting
  those that wait on a sweep). `results` are the runs finished here."""
  results = with_reuse(config, results)
  ready, chosen, waiting = [], {}, 0
  check = check_run(config)
  if check is not None and check not in results:
    ready.append(check)
  ready += reread_runs(config)
  for arm in config.rotary.arms:
    lr, needed = settle(config, results, arm)
    ready += needed
    if lr is None:
      waiting += len(verdict_seeds(config, arm))
      continue
    chosen[arm] = LongRun(arm, int(config.rotary.steps), lr, 0, NO_INIT)
    ready += [dataclasses.replace(chosen[arm], seed=s) for s in verdict_seeds(config, arm)]
  selection = {int(s) for s in config.rotary.selection_seeds}
  ready = [r for r in dict.fromkeys(ready) if r not in results]
  reread = set(reread_runs(config))
  ready.sort(key=lambda r: (r != check, r not in reread, r.seed not in selection, r))
  return ready, chosen, len(ready) + waiting


def reread_runs(config) -> list[LongRun]:
  """`standard` at `rotary.reread_steps` with the rates `rotary.reread_lrs`, verdict seeds
  0..reread_seeds-1: the long study's shortest horizon read at another rate."""
  R = config.rotary
  if not int(R.get('reread_seeds', 0)):
    return []
  return [LongRun(BASE, int(R.reread_steps), float(lr), s, NO_INIT)
          for lr in R.reread_lrs for s in range(int(R.reread_seeds))]


def reread_summary(config, trained: dict) -> dict | None:
  """summary.json's `reread`: standard's losses at each re-read rate beside the long study's
  chosen rate at that horizon, and shared's gap (the long study's shared runs) at both."""
  runs = reread_runs(config)
  path = _reuse_path(config)
  if not runs or not path or not os.path.isfile(path):
    return None
  long = jsonio.read_json(path)
  steps = str(int(config.rotary.reread_steps))
  base = long.get('horizon', {}).get(BASE, {}).get(steps)
  shared = long.get('horizon', {}).get('shared', {}).get(steps)
  if not base or not shared:
    return None
  shared_by_seed = dict(zip(shared['seeds'], shared['losses']))
  out = {'steps': int(steps), 'long_lr': base['lr'],
         'long_losses': dict(zip((str(s) for s in base['seeds']), base['losses'])),
         'shared_long': {'lr': shared['lr'], 'init': shared.get('init'),
                         'losses': {str(s): x for s, x in shared_by_seed.items()}},
         'gap_at_long_lr': seed_stats.difference(
             {s: shared_by_seed[s] - x for s, x in zip(base['seeds'], base['losses'])
              if s in shared_by_seed}),
         'rates': {}}
  for lr in config.rotary.reread_lrs:
    here = {r.seed: float(trained[r]['eval_loss']) for r in runs
            if r.lr == float(lr) and r in trained and trained[r].get('eval_loss') is not None}
    entry = {'losses': {str(s): x for s, x in sorted(here.items())}}
    gaps = {s: shared_by_seed[s] - x for s, x in here.items() if s in shared_by_seed}
    if len(gaps) >= 2:
      entry['gap'] = seed_stats.difference(gaps)
    out['rates'][f'{float(lr):g}'] = entry
  return out


def every_run(config) -> list[LongRun]:
  """Every run the plan could ask for before any result (the static part): for checks."""
  R = config.rotary
  out = []
  for arm in R.arms:
    out += [LongRun(arm, int(R.steps), float(x), int(s), NO_INIT)
            for x in R.lrs for s in R.selection_seeds]
    out += [LongRun(arm, int(R.steps), float(R.lrs[0]), s, NO_INIT)
            for s in verdict_seeds(config, arm)]
  return out


def check_design(config) -> None:
  """The preset's design rules, before anything is written."""
  R = config.rotary
  for arm in R.arms:
    variant, _ = parse_arm(arm)
    if variant not in study_long.attention_variants():
      raise UserError(f'rotary.arms: {arm} names {variant!r}, not a variant; known: '
                      f'{", ".join(study_long.attention_variants())}')
  missing = [a for a in tuple(R.headline_arms) + (BASE, BASE_ROTARY) if a not in R.arms]
  if missing:
    raise UserError(f'rotary.arms lacks {missing}: the headline and every verdict need them')
  verdict = set(range(max(int(R.seeds), int(R.headline_seeds))))
  if len(R.selection_seeds) < 2 or verdict & {int(s) for s in R.selection_seeds}:
    raise UserError(f'rotary.selection_seeds={tuple(R.selection_seeds)}: at least two seeds, '
                    f'none of them a verdict seed (0..{max(verdict)})')
  if min(int(R.seeds), int(R.headline_seeds)) < 2:
    raise UserError('rotary.seeds and rotary.headline_seeds must be at least 2')
  if not R.lrs or min(R.lrs) <= 0:
    raise UserError('rotary.lrs must list positive learning rates')


# ---------------------------------------------------------------------------------------
# Analysis (from the result files and the long study's summary alone).





def analyse(config, workdir: str) -> dict:
  """summary.json of the rotary study (the keys issue 54 names, and more)."""
  R = config.rotary
  trained = study_long.load_results(workdir)
  results = with_reuse(config, trained)
  _, chosen, left = plan(config, trained)
  margin, alpha = float(config.pretrain.margin_nats), float(config.pretrain.alpha)
  steps = int(R.steps)

  def losses(arm: str) -> dict:
    if arm not in chosen:
      return {}
    out = {}
    for s in verdict_seeds(config, arm):
      r = results.get(dataclasses.replace(chosen[arm], seed=s))
      if r is not None and r.get('eval_loss') is not None:
        out[s] = float(r['eval_loss'])
    return out

  by_arm = {arm: losses(arm) for arm in R.arms}
  out = {'design': 'rotary', 'steps': steps,
         'tokens_per_step': study_long.tokens_per_step(config), 'margin_nats': margin,
         'alpha': alpha, 'selection_seeds': [int(s) for s in R.selection_seeds],
         'runs_finished': len(results), 'runs_trained_here': len(trained), 'runs_left': left,
         'reuse': reuse_status(config, trained),
         'preregistered': {
             'file': str(R.preregistered_file), 'commit': str(R.preregistered_commit),
             'hypotheses': [{'id': HEADLINE[0], 'name': HEADLINE[1], 'claim': HEADLINE[2]}] + [
                 {'id': h, 'name': n, 'contrast': f'{a} - {b}',
                  'predicted': {-1: '< 0', 1: '> 0', None: 'no sign'}[sign], 'what': what}
                 for h, n, a, b, sign, what in HYPOTHESES]}}

  # H1: the interaction, per seed over the seeds all four arms have.
  four = ('shared+rotary', BASE_ROTARY, 'shared', BASE)
  common = sorted(set.intersection(*(set(by_arm.get(a, {})) for a in four)))
  inter = {s: (by_arm['shared+rotary'][s] - by_arm[BASE_ROTARY][s])
           - (by_arm['shared'][s] - by_arm[BASE][s]) for s in common}
  entry = {'delta_nats': None, 'ci_low': None, 'ci_high': None, 'seeds': common,
           'power_at_0.2': None}
  if len(inter) >= 2:
    d = seed_stats.difference(inter, 1 - alpha)
    sd = float(np.std(list(inter.values()), ddof=1))
    test = stats.paired_tests(list(inter.values()), margin)
    entry = {**d, 'sd_nats': sd, 'p': test['p_diff'],
             'power_at_0.2': seed_stats.t_power(len(inter), sd, EFFECT_SIZE, alpha),
             'answer': answer(d, -1)}
  out['interaction'] = {'rotary': entry}

  # Every arm against standard with the same positions: one Holm family, descriptive.
  diffs = {}
  for arm in R.arms:
    base = base_of(arm)
    if base is not None:
      d = seed_stats.paired(by_arm[arm], by_arm.get(base, {}))
      if len(d) >= 2:
        diffs[arm] = d
  verdicts = stats.family_verdicts({a: list(d.values()) for a, d in diffs.items()},
                                   margin, alpha) if diffs else {}
  fact = {}
  for arm in R.arms:
    _, model = parse_arm(arm)
    e = {'lr': chosen[arm].lr if arm in chosen else None, 'seeds': sorted(by_arm[arm]),
         'loss_mean': float(np.mean(list(by_arm[arm].values()))) if by_arm[arm] else None,
         'losses': [by_arm[arm][s] for s in sorted(by_arm[arm])],
         'position_embeddings': positions(arm),
         'rope_query_phase': model.get('rope_query_phase', 0.0 if positions(arm) == 'rotary'
                                       else None),
         'against': base_of(arm), 'delta_nats': None, 'ci_low': None, 'ci_high': None,
         'verdict': 'reference' if arm == BASE else 'not finished'}
    if arm in verdicts:
      e.update({k: x for k, x in verdicts[arm].items() if k != 'seeds'})
    fact[arm] = e
  out['factorial'] = fact

  # H2-H7, one Holm family, and the descriptive contrasts.
  eff_diffs = {name: seed_stats.paired(by_arm.get(a, {}), by_arm.get(b, {}))
               for _, name, a, b, _, _ in HYPOTHESES}
  eff_diffs = {n: d for n, d in eff_diffs.items() if len(d) >= 2}
  eff_verdicts = stats.family_verdicts({n: list(d.values()) for n, d in eff_diffs.items()},
                                       margin, alpha) if eff_diffs else {}
  effects = {}
  for h, name, a, b, sign, what in HYPOTHESES:
    e = {'hypothesis': h, 'minuend': a, 'subtrahend': b, 'what': what,
         'predicted': {-1: '< 0', 1: '> 0', None: 'no sign'}[sign]}
    if name in eff_verdicts:
      v = eff_verdicts[name]
      e.update({**seed_stats.difference(eff_diffs[name], 1 - alpha),
                **{k: v[k] for k in ('verdict', 'p_diff', 'p_diff_holm', 'p_tost',
                                     'p_tost_holm')},
                'answer': answer(v, sign)})
    effects[name] = e
  for name, a, b in DESCRIPTIVE:
    d = seed_stats.paired(by_arm.get(a, {}), by_arm.get(b, {}))
    if len(d) >= 2:
      effects[name] = {**seed_stats.difference(d, 1 - alpha), 'minuend': a, 'subtrahend': b,
                       'tested': False}
  out['effects'] = effects

  # Equivalence with Holm: a TOST in a family of m is first judged at alpha/m.
  m = max(1, len(eff_diffs))
  eq = {}
  for name, d in eff_diffs.items():
    values = list(d.values())
    sd = float(np.std(values, ddof=1))
    eq[name] = {'seeds': len(values), 'sd_nats': sd, 'family_size': m,
                'smallest_margin_holm': seed_stats.smallest_margin(values, alpha / m),
                'smallest_margin_unadjusted': seed_stats.smallest_margin(values, alpha),
                'seeds_for_margin_holm': seed_stats.seeds_for_margin(sd, margin, alpha / m),
                'tost_power_at_margin_holm': seed_stats.tost_power(len(values), sd, margin, alpha / m)}
  out['equivalence'] = eq

  # Selection: every arm's sweep, its means over the selection seeds, the plateau check.
  selection = {}
  plateau = float(R.plateau_nats)
  for arm in R.arms:
    runs = {r: s for r, s in results.items() if r.variant == arm and r.steps == steps
            and r.seed in out['selection_seeds']}
    if not runs:
      continue
    rates = sorted({r.lr for r in runs})
    full = [lr for lr in rates if all(LongRun(arm, steps, lr, s, NO_INIT) in runs
                                      for s in out['selection_seeds'])]
    means = selection_means(config, results, arm, full)
    best = chosen[arm].lr if arm in chosen else None
    neighbours = {}
    if best is not None and best in full:
      i = full.index(best)
      for lr in full[max(0, i - 1):i] + full[i + 1:i + 2]:
        neighbours[f'{lr:g}'] = {'mean_loss': means[lr], 'left_plateau': means[lr] < plateau}
    selection[arm] = {
        'losses': {f'{r.lr:g}/seed{r.seed}': (s.get('eval_loss') if s.get('eval_loss')
                                              is not None else 'diverged')
                   for r, s in sorted(runs.items())},
        'means': {f'{lr:g}': x for lr, x in means.items()},
        'reused': sorted(f'{r.lr:g}/seed{r.seed}' for r, s in runs.items() if 'reused_from' in s),
        'chosen_lr': best,
        'interior': bool(best is not None and full and full[0] < best < full[-1]),
        'neighbours': neighbours,
        'bracketed': bool(best is not None and full and full[0] < best < full[-1]
                          and all(n['left_plateau'] for n in neighbours.values()))}
  out['selection'] = selection
  out['plateau_nats'] = plateau
  out['reread'] = reread_summary(config, trained)
  out['curves'] = {f'{r.variant}/seed{r.seed}': s.get('eval_curve')
                   for r, s in sorted(trained.items())
                   if r.seed not in out['selection_seeds'] and s.get('eval_curve')}
  out['wall_s'] = round(sum(s.get('wall_s', 0.0) for s in trained.values()), 1)
  out['step_time_median_s'] = study_long._median([s.get('step_time_median')
                                                  for s in trained.values()])
  out['load_during'] = reporting.load_during(trained.values())
  return out


def answer(verdict: dict, sign: int | None) -> str:
  """A hypothesis' answer from its verdict (or interval): 'confirmed' when the difference
  is decided in the predicted direction, 'refuted' when decided against it, 'not shown'
  otherwise; with no predicted sign, the direction found or 'no difference shown'."""
  v = verdict.get('verdict')
  if v is None:  # An interval alone (the interaction): decided when it excludes 0.
    lo, hi = verdict['ci_low'], verdict['ci_high']
    v = 'better' if hi < 0 else 'worse' if lo > 0 else 'undecided'
  direction = {'better': -1, 'worse': +1}.get(v)
  if sign is None:
    return {-1: 'lower', 1: 'higher'}.get(direction, 'equivalent' if v == 'equivalent'
                                          else 'no difference shown')
  if direction is None:
    return 'not shown'
  return 'confirmed' if direction == sign else 'refuted'
