"""The long study (configs/study.py:cpu_long): its plan and its statistics against
hand-computed cases (its device preset, gpu_long, is now the rotary study's:
test_study_rotary.py)."""

import dataclasses
import math
import os

import pytest

from sharedbert.errors import UserError
from sharedbert.lab import seed_stats
from sharedbert.lab import study
from sharedbert.lab import study_plan
from sharedbert.lab import study_long
from sharedbert.lab import study_long_report
from sharedbert.models.params import load_config_file
from sharedbert.utils import jsonio


LongRun = study_long.LongRun
NA = study_long.NO_INIT


def _config(preset='cpu_long', **long):
  config = load_config_file(os.path.join(study_plan.REPO_CONFIGS, 'study.py'),
                            f'{preset},data=/nowhere')
  config.long.update(long)
  return config


def _small_plan_config():
  """Horizons 10/20/40, factorial at 20, three rates, shared's inits swept up to 20 steps."""
  return _config(horizons=(10, 20, 40), factorial_steps=20, seeds=3, longest_seeds=2,
                 lrs=(1e-3, 2e-3, 4e-3), max_widen=2, init_sweep_max_steps=20)


def _done(workdir, run, loss, step_time=0.1, curve=None):
  path = os.path.join(study_long.run_dir(str(workdir), run), 'study_done.json')
  os.makedirs(os.path.dirname(path))
  jsonio.write_json(path, {'eval_loss': loss, 'step_time_median': step_time, 'wall_s': 1.0,
                           'eval_curve': curve or [[run.steps, loss]]})


def test_presets_resolve_and_keep_selection_apart():
  for preset in study_long_presets():
    config = _config(preset)
    assert config.design == 'long'
    assert int(config.long.selection_seed) >= max(config.long.seeds, config.long.longest_seeds)
    for run in study_long.every_run(config):
      cfg = study_long.run_config(config, run)
      assert cfg.total_steps == run.steps and cfg.seed == run.seed and cfg.optim.lr == run.lr
      assert cfg.model.attention == run.variant
  cpu = _config('cpu_long')
  assert len(cpu.long.horizons) >= 3 and cpu.long.seeds >= 3 and cpu.long.longest_seeds >= 2
  assert max(cpu.long.lrs) / min(cpu.long.lrs) >= 4 and len(cpu.long.lrs) >= 3
  assert {'standard', 'symmetric', 'pairwise', 'kv_shared', 'single', 'shared'} <= set(
      cpu.long.factorial_variants)


def study_long_presets():
  import importlib.util
  spec = importlib.util.spec_from_file_location(
      'study_cfg', os.path.join(study_plan.REPO_CONFIGS, 'study.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.LONG_PRESETS


def test_settle_sweeps_then_widens_at_an_edge_then_brackets():
  config = _small_plan_config()
  results = {}
  best, needed = study_long.settle(config, results, 'standard', 20)
  assert best is None
  assert needed == [LongRun('standard', 20, lr, 100, NA) for lr in (1e-3, 2e-3, 4e-3)]
  # Best at the top edge: 8e-3 is added; there it is worse, so 4e-3 is bracketed.
  for r, loss in zip(needed, (5.0, 4.9, 4.8)):
    results[r] = {'eval_loss': loss}
  best, needed = study_long.settle(config, results, 'standard', 20)
  assert best is None and needed == [LongRun('standard', 20, 8e-3, 100, NA)]
  results[needed[0]] = {'eval_loss': 4.85}
  best, needed = study_long.settle(config, results, 'standard', 20)
  assert best == LongRun('standard', 20, 4e-3, 100, NA) and needed == []


def test_settle_stops_widening_after_max_widen_and_skips_diverged_runs():
  config = _small_plan_config()
  results = {LongRun('standard', 10, lr, 100, NA): {'eval_loss': loss} for lr, loss in
             ((1e-3, 4.0), (2e-3, 4.5), (4e-3, None))}  # 4e-3 diverged.
  results[LongRun('standard', 10, 5e-4, 100, NA)] = {'eval_loss': 3.9}
  results[LongRun('standard', 10, 2.5e-4, 100, NA)] = {'eval_loss': 3.8}
  best, needed = study_long.settle(config, results, 'standard', 10)
  assert needed == [] and best.lr == 2.5e-4  # Two widenings, still at the edge: stop.


def test_the_init_variant_sweeps_inits_jointly_then_longer_horizons_inherit_its_init():
  config = _small_plan_config()
  results = {}
  _, needed = study_long.settle(config, results, 'shared', 20)
  assert {(r.lr, r.init) for r in needed} == {(lr, i) for lr in (1e-3, 2e-3, 4e-3)
                                              for i in ('signs', 'normal')}
  for r in needed:
    results[r] = {'eval_loss': 5.0 - (0.3 if r.init == 'normal' else 0) - (r.lr == 2e-3) * 0.1}
  best, _ = study_long.settle(config, results, 'shared', 20)
  assert (best.lr, best.init) == (2e-3, 'normal')
  # 40 steps is past init_sweep_max_steps: rates only, with the init chosen at 20 steps.
  _, needed = study_long.settle(config, results, 'shared', 40)
  assert {(r.lr, r.init) for r in needed} == {(lr, 'normal') for lr in (1e-3, 2e-3, 4e-3)}


def test_plan_waits_for_sweeps_and_runs_shortest_first():
  config = _small_plan_config()
  ready, chosen, left = study_long.plan(config, {})
  assert chosen == {}
  assert [r.steps for r in ready] == sorted(r.steps for r in ready)
  assert all(r.seed == 100 for r in ready)  # Only selection runs before any result.
  assert left > len(ready)                  # Verdict and equal-FLOPs runs wait.


def test_lack_of_fit_against_the_long_studys_own_figures():
  # The long study's per-seed gaps (docs/study_cpu_long/summary.json): the review's
  # F(1, 5) = 16.6, p = 0.010.
  tokens = {1: 2_048_000, 2: 4_096_000, 4: 8_192_000}
  gaps = {1: [0.012483555213416153, -0.05015822674225401, -0.0037778104285237646],
          2: [0.5121919497169565, 0.3474628390631933, 0.5524051754007534],
          4: [0.45792410281696567, 0.5386987632611125]}
  pts = [(tokens[k], g) for k, v in gaps.items() for g in v]
  lof = seed_stats.lack_of_fit(pts)
  assert (lof['df_lack'], lof['df_pure']) == (1, 5)
  assert lof['F'] == pytest.approx(16.6, abs=0.05) and lof['p'] == pytest.approx(0.010, abs=5e-4)
  assert seed_stats.trend(pts)['direction'] == 'no line'
  # An exact line with scatter at each x passes (F near 0).
  line = [(2 ** k, 0.1 * k + e) for k in (10, 11, 12) for e in (-0.05, 0.05)]
  assert seed_stats.lack_of_fit(line)['F'] == pytest.approx(0.0, abs=1e-9)
  assert seed_stats.trend(line)['line_fits']
  assert seed_stats.lack_of_fit([(1, 0.0), (2, 1.0), (4, 0.5)]) is None  # No replicates.


def test_trend_of_an_exact_line_and_of_noise():
  pts = [(2 ** k, 0.5 - 0.1 * k) for k in (10, 11, 12, 13)]
  fit = seed_stats.trend(pts)
  assert fit['slope_per_doubling'] == pytest.approx(-0.1)
  assert fit['ci_low'] == pytest.approx(-0.1) and fit['direction'] == 'shrinks'
  noisy = [(1000, 0.3), (1000, -0.3), (2000, 0.2), (2000, -0.2), (4000, 0.3), (4000, -0.3)]
  assert seed_stats.trend(noisy)['direction'] == 'undecided'
  assert seed_stats.trend([(1000, 0.1), (1000, 0.2)]) is None
  # Two horizons, three seeds each (as at 58 runs of cpu_long): no trend from two means.
  assert seed_stats.trend([(1000, 0.0), (1000, 0.1), (1000, -0.1),
                           (2000, 0.5), (2000, 0.4), (2000, 0.6)]) is None


def test_smallest_margin_and_seeds_needed_by_hand():
  from scipy import stats as sp_stats
  d = [0.1, 0.2, 0.3]  # sd 0.1, n 3.
  assert seed_stats.smallest_margin(d, 0.05) == pytest.approx(
      sp_stats.t.ppf(0.95, 2) * 0.1 / math.sqrt(3))
  n = seed_stats.seeds_for_margin(0.1, 0.05, 0.05)
  assert sp_stats.t.ppf(0.95, n - 1) * 0.1 / math.sqrt(n) < 0.05
  assert sp_stats.t.ppf(0.95, n - 2) * 0.1 / math.sqrt(n - 1) >= 0.05
  assert seed_stats.seeds_for_margin(10.0, 0.05, 0.05) is None


def _fabricate_finished_study(workdir, config):
  """Every run of the plan with losses built so that each effect is known by hand:
  standard 4.0 + seed/10 at the factorial horizon; symmetric +0.3, kv_shared +0.1,
  single +0.5, shared = single - 0.2 (+0.3), pairwise = symmetric - 0.25; shared's gap to
  standard at 10/20/40 steps +0.4/+0.3/+0.1 plus seed noise 0.01*seed."""
  offsets = {'standard': 0.0, 'symmetric': 0.3, 'kv_shared': 0.1, 'single': 0.5,
             'shared': 0.3, 'pairwise': 0.05}
  gap = {10: 0.4, 20: 0.3, 40: 0.1}
  results = {}
  for _ in range(50):
    ready, _, _ = study_long.plan(config, results)
    if not ready:
      break
    for r in ready:
      if r.seed == 100:  # Selection: 2e-3 best for everyone, signs best for shared.
        loss = 4.5 + abs(math.log2(r.lr / 2e-3)) * 0.1 + (r.init == 'normal') * 0.05
      elif r.variant == 'standard' and r.steps not in gap:  # The equal-FLOPs runs.
        loss = 4.0 + r.seed / 10 + 0.02
      else:
        base = 4.0 + r.seed / 10
        if r.steps == 20:
          loss = base + offsets[r.variant] + (0.01 * r.seed if r.variant == 'shared' else 0)
        else:
          loss = base + (gap[r.steps] + 0.01 * r.seed if r.variant == 'shared' else 0)
      results[r] = {'eval_loss': loss}
      _done(workdir, r, loss, curve=[[r.steps // 2, loss + 1], [r.steps, loss]])
  return results


def test_analysis_of_a_finished_plan_against_hand_computed_effects(tmp_path):
  config = _small_plan_config()
  _fabricate_finished_study(tmp_path, config)
  s = study_long.analyse(config, str(tmp_path))
  assert s['runs_left'] == 0
  seeds_used = set()
  # Horizon: shared - standard = gap + 0.01*seed at every horizon.
  for h, g in ((10, 0.4), (20, 0.3), (40, 0.1)):
    e = s['horizon']['gap'][str(h)]
    n = 2 if h == 40 else 3
    assert len(e["seeds"]) == n and e["delta_nats"] == pytest.approx(g + 0.01 * (n - 1) / 2)
    for v in ('standard', 'shared'):
      entry = s['horizon'][v][str(h)]
      assert set(entry) >= {'loss_mean', 'seeds', 'lr'} and entry['lr'] == 2e-3
      seeds_used |= set(entry['seeds'])
  # 0.4, 0.3, 0.1: not a line in log-tokens, and the seeds' scatter is tiny: the line fails
  # its lack-of-fit test, and the shape is told by the changes from horizon to horizon.
  trend = s['horizon']['trend']
  assert trend['direction'] == 'no line' and trend['lack_of_fit']['p'] < 0.05
  changes = s['horizon']['changes']
  assert changes['10->20']['per_seed'] == pytest.approx([-0.1] * 3)
  assert changes['20->40']['per_seed'] == pytest.approx([-0.2] * 2)
  # Factorial effects (differences of the offsets; shared carries 0.01*seed).
  f = s['factorial']
  expect = {'tie_qk': 0.3, 'tie_kv': 0.1, 'tie_qkv': 0.5, 'diagonals': -0.2 + 0.01,
            'asymmetry': -0.25}
  for name, value in expect.items():
    assert f['effects'][name]['delta_nats'] == pytest.approx(value), name
    assert set(f['effects'][name]) >= {'delta_nats', 'ci_low', 'ci_high'}
  assert f['effects']['tie_qk']['ci_low'] == pytest.approx(0.3)  # No spread: a point.
  # K = V on top of Q = K: single - symmetric; the ties' interaction: 0.5 - 0.3 - 0.1.
  assert f['effects']['tie_kv_given_qk']['delta_nats'] == pytest.approx(0.2)
  assert f['effects']['tie_interaction']['delta_nats'] == pytest.approx(0.1)
  assert f['effects']['diagonals']['per_seed'] == pytest.approx([-0.2, -0.19, -0.18])
  for v in ('symmetric', 'pairwise', 'kv_shared', 'single', 'shared'):
    assert set(f[v]) >= {'delta_nats', 'ci_low', 'ci_high', 'verdict', 'seeds', 'lr'}
    assert len(f[v]['seeds']) >= 3
    seeds_used |= set(f[v]['seeds'])
  assert f['shared']['init'] == 'signs' and f['symmetric']['verdict'] == 'worse'
  # Equal FLOPs: shared at 20 steps against standard at fewer steps, 4.02 + seed/10.
  eq = s['equal_flops']['shared']
  assert eq['standard_steps'] < 20 and eq['flops_ratio'] < 1
  assert eq['delta_nats'] == pytest.approx(0.3 + 0.01 - 0.02)
  assert set(eq) >= {'standard_steps', 'delta_nats', 'ci_low', 'ci_high', 'seeds'}
  assert s['selection_seed'] not in seeds_used
  assert all(e['bracketed'] for e in s['selection'].values())
  # The report leads with the horizon figure and the factorial table.
  path = study_long_report.write_report(config, str(tmp_path))
  text = open(path).read()
  assert text.index('horizon.png') < text.index('| variant | lr | seeds |')
  assert 'fails its lack-of-fit test' in text and os.path.exists(tmp_path / 'horizon.png')
  assert '-0.100 [-0.100, -0.100] from' in text  # The change from 10 to 20 steps.
  assert 'Tying Q, K and V costs' in text and 'bookkeeping, not a finding' in text
  assert 'The ties do not add' in text
  assert jsonio.read_json(tmp_path / 'summary.json')['factorial']['effects']


def test_long_preflight_refuses_a_selection_seed_among_the_verdict_seeds(tmp_path):
  config = _config(selection_seed=1)
  config.pretrain.override.data.corpus = str(tmp_path)
  with pytest.raises(UserError, match='selection_seed=1 is a verdict seed'):
    study.long_preflight(config, str(tmp_path / 'w'))
  assert not (tmp_path / 'w').exists()


def test_an_orphaned_worker_does_not_start_a_queued_job():
  """After its parent dies a pool worker may still hold a queued run: it exits instead of
  training it (a killed study's workers went on to the next run)."""
  import subprocess
  import sys
  code = ('from sharedbert.utils import workers; workers._PARENT_PID = -1; '
          'workers.call_if_parent_alive(print, "ran")')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
  assert out.returncode == 1 and 'ran' not in out.stdout
  code = ('import os; from sharedbert.utils import workers; workers._PARENT_PID = os.getppid(); '
          'workers.call_if_parent_alive(print, "ran")')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
  assert out.returncode == 0 and 'ran' in out.stdout


def test_device_script_runs_the_gpu_long_preset_and_refuses_without_a_gpu():
  import subprocess
  root = os.path.dirname(study_plan.REPO_CONFIGS)
  script = os.path.join(root, 'bench', 'gpu_long.sh')
  text = open(script).read()
  assert 'configs/study.py:gpu_long' in text and 'sharedbert.lab.study' in text
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  out = subprocess.run(['bash', script], capture_output=True, text=True, env=env, timeout=300)
  assert out.returncode != 0 and 'no GPU visible' in out.stderr


def test_the_factorial_sentence_names_no_carrier_and_says_what_it_cannot_separate():
  def summary(**deltas):
    effects = {k: {'delta_nats': d, 'ci_low': d - 0.1, 'ci_high': d + 0.1}
               for k, d in deltas.items()}
    return {'factorial': {'steps': 2000, 'effects': effects,
                          'shared': {'delta_nats': 0.47, 'ci_low': 0.2, 'ci_high': 0.74}}}
  s = summary(tie_qk=0.561, tie_kv=0.031, tie_qkv=0.912, diagonals=-0.441,
              tie_kv_given_qk=0.350, tie_interaction=0.320)
  s['attention'] = {'symmetric': {'trained': {'self_share': 0.388}},
                    'shared': {'trained': {'self_share': 0.074}}}
  text = study_long_report.factorial_sentence(s)
  assert 'carries' not in text and 'costs the most' not in text and '**' not in text
  assert 'bookkeeping, not a finding' in text
  assert ('The ties do not add: K = V on top of Q = K (single − symmetric) costs +0.350 '
          '[+0.250, +0.450]; their interaction is +0.320 [+0.220, +0.420].') in text
  assert '0.388 in symmetric, 0.074 in shared' in text and '`shared_qk` cell' in text
  # Without the derived effects or the attention statistics, those sentences are left out.
  text = study_long_report.factorial_sentence(summary(tie_qk=0.6, tie_kv=0.03, tie_qkv=0.91,
                                                      diagonals=-0.9))
  assert 'do not add' not in text and 'favours itself' not in text
  assert study_long_report.factorial_sentence(summary(tie_kv=0.03)).startswith(
      'The factorial is not finished')


def test_the_report_says_plainly_whether_equivalence_is_reachable():
  s = {'margin_nats': 0.05, 'equivalence': {'a': {'smallest_margin': 0.2},
                                            'b': {'smallest_margin': 0.01}}}
  assert '**not reachable** for 1 of 2' in study_long_report.equivalence_sentence(s)
  s['equivalence'].pop('a')
  assert 'can say "equivalent"' in study_long_report.equivalence_sentence(s)


def test_the_eta_is_not_thrown_by_a_run_that_was_paused():
  """A run that straddled a pause (SIGSTOP while the suite ran) took 6,796 s for 2,000
  steps; with a mean rate the study said 'about 3002 min'."""
  rates = [0.5, 0.52, 0.49, 6796 / 2000, 0.51]
  assert study_long.eta_minutes(rates, 60_000, 2) == pytest.approx(0.51 * 60_000 / 2 / 60)


def test_a_factorial_variant_without_its_verdict_seeds_reads_not_finished(tmp_path):
  """In a snapshot taken while `symmetric`'s verdict seeds train, its row said '(base)',
  as if it were the reference."""
  config = _small_plan_config()
  results = _fabricate_finished_study(tmp_path, config)
  for run in results:
    if run.variant == 'symmetric' and run.seed != config.long.selection_seed:
      os.remove(os.path.join(study_long.run_dir(str(tmp_path), run), 'study_done.json'))
  text = open(study_long_report.write_report(config, str(tmp_path))).read()
  rows = {line.split(' | ')[0]: line for line in text.splitlines()
          if line.startswith('| ') and line.count(' | ') == 5}
  assert rows['| standard'].endswith('| (base) |  |')
  assert rows['| symmetric'].endswith('| – | not finished |')
  assert '(base)' not in rows['| symmetric'] and '(base)' not in rows['| shared']
  assert rows['| shared'].endswith(' | worse |')


def test_the_attention_table_averages_seeds_and_layers():
  layers = lambda *rows: [dict(zip(('self_share', 'top_weight', 'logit_sd'), r)) for r in rows]
  per_seed = {'0': layers((0.04, 0.06, 0.3), (0.02, 0.08, 0.5)),
              '1': layers((0.02, 0.06, 0.5), (0.04, 0.08, 0.3))}
  s = {'factorial': {'steps': 2000}, 'attention': {
      'standard': {'rows': 64, 'tokens_per_row': 25.0,
                   'init': {'seeds': [0, 1], 'self_share': 0.03, 'top_weight': 0.07,
                            'logit_sd': 0.4, 'per_seed': per_seed}},
      'pairwise': {'rows': 64, 'tokens_per_row': 25.0,
                   'init': {'seeds': [0], 'self_share': 0.03, 'top_weight': 0.45,
                            'logit_sd': 2.9},
                   'trained': {'seeds': [0], 'self_share': 0.1, 'top_weight': 0.5,
                               'logit_sd': 4.0}}}}
  text = study_long_report.attention_section(s)
  assert '64 rows of about 25 real tokens' in text and 'about 0.040' in text
  assert '| standard | 2 | 0.030 → – | 0.070 → – | 0.400 → – |' in text
  assert '| pairwise | 1 | 0.030 → 0.100 | 0.450 → 0.500 | 2.900 → 4.000 |' in text
  assert 'not computed yet' in study_long_report.attention_section({})


def test_the_attention_summary_means_seeds_and_layers(tmp_path):
  config = _small_plan_config()
  _fabricate_finished_study(tmp_path, config)
  _, chosen, _ = study_long.plan(config, study_long.load_results(str(tmp_path)))
  run = dataclasses.replace(chosen[('symmetric', 20)], seed=0)
  layers = lambda *rows: [dict(zip(study_long.ATTENTION_KEYS, r)) for r in rows]
  cache = {f'symmetric/{run.tag}': {'rows': 4, 'tokens_per_row': 10.0,
                                    'init': layers((0.2, 0.2, 0.5), (0.4, 0.4, 0.7)),
                                    'trained': layers((0.1, 0.3, 1.0), (0.1, 0.5, 3.0))},
           f'symmetric/{dataclasses.replace(run, seed=1).tag}': {
               'rows': 4, 'tokens_per_row': 10.0, 'init': layers((0.0, 0.0, 0.3), (0.2, 0.2, 0.5))},
           'symmetric/s999_lr1_seed0_na': {'init': layers((9, 9, 9))}}  # Not in the plan.
  jsonio.write_json(os.path.join(tmp_path, 'runs', study_long.ATTENTION_FILE), cache)
  att = study_long.analyse(config, str(tmp_path))['attention']
  assert list(att) == ['symmetric']
  e = att['symmetric']
  assert e['init']['seeds'] == [0, 1] and e['trained']['seeds'] == [0]
  assert e['init']['self_share'] == pytest.approx(0.2)   # (0.2 + 0.4 + 0.0 + 0.2) / 4
  assert e['init']['logit_sd'] == pytest.approx(0.5)
  assert e['trained']['top_weight'] == pytest.approx(0.4)
  assert e['trained']['per_seed'] == {'0': cache[f'symmetric/{run.tag}']['trained']}
