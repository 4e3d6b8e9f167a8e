"""The rotary study (configs/study.py:cpu_rotary, issue 54): its preset, selection on two
seeds, the gated reuse of the long study's runs, its statistics against hand-computed
cases, and the plumbing end to end at toy size."""

import glob
import math
import os

import numpy as np
import pytest
from scipy import stats as sp_stats

from sharedbert.errors import UserError
from sharedbert.lab import seed_stats
from sharedbert.lab import study
from sharedbert.lab import study_plan
from sharedbert.lab import study_long
from sharedbert.lab import study_rotary
from sharedbert.lab import study_rotary_report
from sharedbert.models.params import load_config_file
from sharedbert.utils import jsonio
from sharedbert.utils import reporting

from test_study import _write_fixture_data

LongRun = study_long.LongRun
NA = study_long.NO_INIT


def _config(preset='cpu_rotary', **rotary):
  config = load_config_file(os.path.join(study_plan.REPO_CONFIGS, 'study.py'), f'{preset},data=/x')
  config.rotary.update(rotary)
  return config


def _done(workdir, run, loss):
  path = os.path.join(study_long.run_dir(str(workdir), run), 'study_done.json')
  os.makedirs(os.path.dirname(path))
  jsonio.write_json(path, {'eval_loss': loss, 'wall_s': 2.0, 'step_time_median': 0.1,
                           'eval_curve': [[run.steps, loss]]})


def test_the_preset_keeps_the_design_it_registered():
  config = _config()
  R = config.rotary
  assert config.design == 'rotary' and R.steps == 2000
  assert {'standard', 'shared', 'symmetric', 'kv_shared', 'shared_qk'} <= set(R.arms)
  for v in ('standard', 'shared', 'symmetric', 'kv_shared', 'shared_qk'):
    assert f'{v}+rotary' in R.arms
  assert {'shared+rotary+phi1', 'symmetric+rotary+phi1'} <= set(R.arms) and len(R.arms) == 12
  assert len(R.lrs) >= 3 and max(R.lrs) / min(R.lrs) >= 4
  assert len(R.selection_seeds) >= 2 and R.seeds >= 4 and R.headline_seeds == 8
  verdict = {s for arm in R.arms for s in study_rotary.verdict_seeds(config, arm)}
  assert not verdict & set(R.selection_seeds)
  study_rotary.check_design(config)
  cfg = study_rotary.run_config(config, LongRun('symmetric+rotary+phi1', 2000, 4e-3, 3, NA))
  assert (cfg.model.attention, cfg.model.position_embeddings, cfg.model.rope_query_phase) == (
      'symmetric', 'rotary', 1.0)
  assert (cfg.total_steps, cfg.optim.lr, cfg.seed) == (2000, 4e-3, 3)
  cfg = study_rotary.run_config(config, LongRun('shared', 2000, 4e-3, 0, NA))
  assert cfg.model.position_embeddings == 'learned' and cfg.model.diag_init_scheme == 'signs'
  # The long study's run recipe, unchanged: its runs can be reused.
  long = load_config_file(os.path.join(study_plan.REPO_CONFIGS, 'study.py'), 'cpu_long,data=/x')
  a = study_long.run_config(long, LongRun('standard', 2000, 4e-3, 100, NA)).to_dict()
  b = study_rotary.run_config(config, LongRun('standard', 2000, 4e-3, 100, NA)).to_dict()
  # The rotary preset pins shared's init for every arm; standard has no such setting.
  a['model'].pop('diag_init_scheme', None), b['model'].pop('diag_init_scheme', None)
  assert a == b


@pytest.mark.parametrize('arm,why', [('shared+learned', 'unknown part'),
                                     ('shared+phi1', 'unknown part'),
                                     ('shared+rotary+phiX', 'not phi<number>')])
def test_a_malformed_arm_is_refused(arm, why):
  with pytest.raises(UserError, match=why):
    study_rotary.parse_arm(arm)


def test_check_design_refuses_a_selection_seed_among_verdict_seeds_and_unknown_variants():
  with pytest.raises(UserError, match='selection_seeds'):
    study_rotary.check_design(_config(selection_seeds=(100, 3)))
  with pytest.raises(UserError, match='selection_seeds'):
    study_rotary.check_design(_config(selection_seeds=(100,)))
  with pytest.raises(UserError, match='not a variant'):
    study_rotary.check_design(_config(arms=_config().rotary.arms + ('nope+rotary',)))


def test_selection_takes_the_mean_of_two_seeds_and_widens_once_on_both(tmp_path):
  config = _config(arms=('standard',), lrs=(1e-3, 2e-3, 4e-3), max_widen=1, reuse_summary='')
  results = {}
  _, needed = study_rotary.settle(config, results, 'standard')
  assert len(needed) == 6 and {r.seed for r in needed} == {100, 101}
  # Seed 100 alone would pick 2e-3; the mean picks 4e-3, an edge: 8e-3 is added on both.
  loss = {(1e-3, 100): 5.0, (2e-3, 100): 4.0, (4e-3, 100): 4.1,
          (1e-3, 101): 5.0, (2e-3, 101): 4.4, (4e-3, 101): 4.1}
  results = {LongRun('standard', 2000, lr, s, NA): {'eval_loss': x} for (lr, s), x in loss.items()}
  best, needed = study_rotary.settle(config, results, 'standard')
  assert best is None and sorted((r.lr, r.seed) for r in needed) == [(8e-3, 100), (8e-3, 101)]
  results.update({r: {'eval_loss': 3.9} for r in needed})
  assert study_rotary.settle(config, results, 'standard') == (8e-3, [])  # max_widen reached.
  results.update({r: {'eval_loss': None} for r in needed})  # Diverged: the worst.
  assert study_rotary.settle(config, results, 'standard') == (4e-3, [])


def _long_summary(path, standard_4e3_seed100=3.9848524536855905):
  jsonio.write_json(path, {
      'selection_seed': 100,
      'selection': {'standard@2000': {'losses': {'0.002': 4.02, '0.004': standard_4e3_seed100,
                                                 '0.008': 6.01}},
                    'shared@2000': {'losses': {'0.004/normal': 4.5}}},
      'factorial': {'standard': {'lr': 0.004}},
      'curves': {'standard@2000/seed0': [[1000, 4.6], [2000, 4.04]],
                 'standard@1000/seed0': [[1000, 5.1]]}})


def test_reuse_waits_for_the_check_run_and_refuses_a_mismatch(tmp_path):
  path = str(tmp_path / 'long.json')
  _long_summary(path)
  config = _config(arms=('standard',), reuse_summary=path, reuse_arms=('standard',),
                   reuse_check=('standard', 4e-3, 100))
  table = study_rotary.reusable(config)
  assert table == {LongRun('standard', 2000, 2e-3, 100, NA): 4.02,
                   LongRun('standard', 2000, 4e-3, 100, NA): 3.9848524536855905,
                   LongRun('standard', 2000, 8e-3, 100, NA): 6.01,
                   LongRun('standard', 2000, 4e-3, 0, NA): 4.04}
  check = LongRun('standard', 2000, 4e-3, 100, NA)
  ready, _, _ = study_rotary.plan(config, {})
  assert ready[0] == check  # Trained first, before anything is reused.
  assert study_rotary.with_reuse(config, {}) == {}
  same = {check: {'eval_loss': 3.9848524536855905 + 5e-7}}
  merged = study_rotary.with_reuse(config, same)
  assert len(merged) == 4 and merged[check] == same[check]
  assert merged[LongRun('standard', 2000, 4e-3, 0, NA)]['reused_from'] == path
  ready, _, _ = study_rotary.plan(config, same)
  assert LongRun('standard', 2000, 2e-3, 100, NA) not in ready
  assert LongRun('standard', 2000, 2e-3, 101, NA) in ready
  other = {check: {'eval_loss': 3.9848524536855905 + 2e-6}}
  assert study_rotary.with_reuse(config, other) == other
  status = study_rotary.reuse_status(config, other)
  assert not status['used'] and 'differs' in status['why']
  with pytest.raises(UserError, match='no such file'):
    study_rotary.reusable(_config(reuse_summary=str(tmp_path / 'none.json')))
  with pytest.raises(UserError, match='not a learned'):
    study_rotary.reusable(_config(reuse_summary=path, reuse_arms=('standard+rotary',)))


def test_power_by_hand_and_by_simulation():
  # The pre-registration's figure: sd 0.154, 8 seeds, 0.2 nats, two-sided 0.05: 0.88.
  assert seed_stats.t_power(8, 0.154, 0.2, 0.05) == pytest.approx(0.88, abs=0.01)
  assert seed_stats.t_power(4, 0.154, 0.2, 0.05) == pytest.approx(0.43, abs=0.01)
  # A z-approximation bound: power below the known-sd test's, above 0.
  n, sd = 6, 0.1
  z = 0.2 / (sd / math.sqrt(n))
  z_power = sp_stats.norm.sf(1.96 - z) + sp_stats.norm.cdf(-1.96 - z)
  assert 0 < seed_stats.t_power(n, sd, 0.2, 0.05) < z_power
  # TOST with a tiny spread always passes; with a huge one, never.
  assert seed_stats.tost_power(8, 1e-4, 0.05, 0.05) == 1.0
  assert seed_stats.tost_power(8, 10.0, 0.05, 0.05) == 0.0
  # Against the integral over the sample sd: P = E_s[2 Phi((margin - t s/sqrt(n)) /
  # (sd/sqrt(n))) - 1], s = sd * sqrt(chi2_{n-1} / (n-1)).
  from scipy import integrate
  n, sd, margin, alpha = 8, 0.05, 0.05, 0.05 / 6
  t, se = sp_stats.t.ppf(1 - alpha, n - 1), sd / math.sqrt(n)

  def density(q):  # q = chi2_{n-1}
    s = sd * math.sqrt(q / (n - 1))
    inner = max(0.0, 2 * sp_stats.norm.cdf((margin - t * s / math.sqrt(n)) / se) - 1)
    return inner * sp_stats.chi2.pdf(q, n - 1)

  exact, _ = integrate.quad(density, 0, 60, limit=200)
  assert seed_stats.tost_power(n, sd, margin, alpha) == pytest.approx(exact, abs=0.005)


def _fabricate(workdir, config):
  """Every run of the plan: selection 4e-3 best everywhere; verdict losses
  standard 4.0 + s/10 (learned), standard+rotary = standard - 0.1, shared +0.5 over
  standard, shared+rotary +0.2 over standard+rotary (so the interaction is -0.3, plus the
  seed noise 0.01*s*(-1)^s on shared+rotary), shared_qk +0.3, symmetric +0.6,
  symmetric+rotary+phi1 = symmetric+rotary - 0.2, every other rotary arm its learned
  offset."""
  offset = {'standard': 0.0, 'shared': 0.5, 'shared_qk': 0.3, 'symmetric': 0.6,
            'kv_shared': 0.05}
  results = {}
  for _ in range(10):
    ready, _, _ = study_rotary.plan(config, results)
    if not ready:
      break
    for r in ready:
      if r.seed >= 100:
        loss = 6.0 + abs(math.log2(r.lr / 4e-3)) * 0.3 + 0.01 * (r.seed - 100)
      else:
        variant, model = study_rotary.parse_arm(r.variant)
        rotary = 'position_embeddings' in model
        loss = 4.0 + r.seed / 10 + offset[variant] - 0.1 * rotary
        if r.variant == 'shared+rotary':
          loss += -0.3 + 0.01 * r.seed * (-1) ** r.seed
        if 'rope_query_phase' in model:
          loss -= 0.2
      results[r] = {'eval_loss': loss}
      _done(workdir, r, loss)
  return results


def test_analysis_of_a_finished_study_against_hand_computed_figures(tmp_path):
  config = _config(reuse_summary='')
  _fabricate(tmp_path, config)
  s = study_rotary.analyse(config, str(tmp_path))
  assert s['runs_left'] == 0 and s['runs_finished'] == 12 * 6 + 4 * 8 + 8 * 4 + 3  # + re-read
  assert s['selection_seeds'] == [100, 101]
  i = s['interaction']['rotary']
  per_seed = [-0.3 + 0.01 * k * (-1) ** k for k in range(8)]
  assert i['seeds'] == list(range(8)) and i['delta_nats'] == pytest.approx(np.mean(per_seed))
  low, high = sp_stats.t.interval(0.95, 7, np.mean(per_seed), sp_stats.sem(per_seed))
  assert (i['ci_low'], i['ci_high']) == (pytest.approx(low), pytest.approx(high))
  assert i['answer'] == 'confirmed' and i['power_at_0.2'] == pytest.approx(
      seed_stats.t_power(8, np.std(per_seed, ddof=1), 0.2, 0.05))
  e = s['effects']
  assert e['score_symmetry']['delta_nats'] == pytest.approx(0.3)
  assert e['self_favouring']['delta_nats'] == pytest.approx(0.3)
  assert e['v_tie']['delta_nats'] == pytest.approx(0.2)
  assert e['phi_on_symmetric']['delta_nats'] == pytest.approx(-0.2)
  assert e['rotary_on_standard']['delta_nats'] == pytest.approx(-0.1)
  # Exact offsets: every tested contrast is decided, each in its predicted direction.
  assert e['score_symmetry']['answer'] == e['self_favouring']['answer'] == 'confirmed'
  assert e['phi_on_symmetric']['answer'] == e['rotary_on_shared']['answer'] == 'confirmed'
  assert e['v_tie']['answer'] == 'higher' and e['rotary_on_standard']['answer'] == 'lower'
  assert e['v_tie_rotary']['tested'] is False
  f = s['factorial']
  assert f['standard']['verdict'] == 'reference' and len(f['standard']['seeds']) == 8
  assert f['kv_shared+rotary']['against'] == 'standard+rotary'
  assert f['standard+rotary']['against'] == 'standard'
  assert f['kv_shared']['delta_nats'] == pytest.approx(0.05) and f['kv_shared']['lr'] == 4e-3
  assert all(len(x['seeds']) >= 4 for x in f.values())
  assert f['symmetric+rotary+phi1']['rope_query_phase'] == 1.0
  assert f['shared']['position_embeddings'] == 'learned'
  sel = s['selection']['shared_qk']
  assert sel['chosen_lr'] == 4e-3 and sel['means']['0.004'] == pytest.approx(6.005)
  # Its neighbours ended at 6.3 nats: interior, but not bracketed (they stayed on the plateau).
  assert sel['interior'] and not sel['bracketed']
  assert not {s2 for x in f.values() for s2 in x['seeds']} & set(s['selection_seeds'])
  eq = s['equivalence']['score_symmetry']
  assert eq['family_size'] == 6 and eq['smallest_margin_holm'] == pytest.approx(0.0, abs=1e-9)
  report = study_rotary_report.render(s)
  assert report.index('**H1 (headline): confirmed.**') < report.index('## Every arm')
  assert '| H5 | shared_qk - standard | > 0 | +0.300' in report
  assert 'Partial' not in report
  # The README's paragraph: H1, shared's gap under each kind of position, H2-H7.
  text = study_rotary_report.readme_sentence(s)
  assert text.startswith("Rotary positions narrowed `shared`'s gap (H1 confirmed): ")
  assert '`shared` − `standard` is +0.500 [' in text and 'and +0.195 [' in text
  assert 'H5 shared_qk - standard +0.300' in text and 'H7 shared - shared_qk +0.200' in text
  assert f'**In one paragraph.** {text}' in report and '\n' not in text
  # A p value too small for three places says so instead of printing 0.000.
  s['interaction']['rotary']['p'] = 1.3e-7
  assert '(p < 0.001; power' in study_rotary_report.readme_sentence(s)
  s['interaction']['rotary']['p'] = 0.0123
  assert '(p = 0.012; power' in study_rotary_report.readme_sentence(s)
  # An arm whose sweep has not chosen a rate yet says so, not "at an edge".
  s['selection']['shared_qk'].update(chosen_lr=None, interior=False, bracketed=False)
  row = [r for r in study_rotary_report.selection_table(s) if r.startswith('| shared_qk |')]
  assert row[0].endswith('| no (no rate chosen yet) | none |')


def test_the_report_of_a_study_that_has_only_begun(tmp_path):
  config = _config(reuse_summary='')
  s = study_rotary.analyse(config, str(tmp_path))
  report = study_rotary_report.render(s)
  assert 'Not answered yet' in report and 'Partial' in report and s['runs_left'] == 139
  assert study_rotary_report.readme_sentence(s) == 'No result is claimed yet.'


def test_toy_study_end_to_end_with_reuse_and_resume(tmp_path):
  """Three arms at 4 steps on a toy model: the check run, reuse of a fabricated 'long
  study' written from the check run's own loss, selection on two seeds, verdicts, the
  report; then a rerun that trains nothing."""
  corpus, _ = _write_fixture_data(tmp_path)
  config = _config(arms=('standard', 'standard+rotary', 'shared+rotary'),
                   headline_arms=('standard',), steps=4, lrs=(1e-3,), max_widen=0,
                   seeds=2, headline_seeds=2, reuse_arms=('standard',),
                   reuse_check=('standard', 1e-3, 100), reread_seeds=0)
  config.long.checkpoint_every_steps = 4
  config.pretrain.workers = 1
  config.long.evals_per_run = 2
  p = config.pretrain.override
  p.data.corpus = corpus
  p.data.batch_size = 8
  p.data.seq_len = 32
  p.data.vocab_train_sentences = 10_000
  p.data.eval_fraction = 0.1
  p.model.update(num_layers=1, hidden_size=32, num_heads=2, mlp_dim=64, vocab_size=256,
                 max_position_embeddings=32, dtype='float32')
  p.eval_batches = 1
  p.log_every_steps = 2
  workdir = str(tmp_path / 'w')
  archive = str(tmp_path / 'archive')
  # First without reuse: the check run trains with the rest, each archived as it finishes.
  config.rotary.reuse_summary = ''
  study.run_study(config, workdir, archive=archive)
  s = jsonio.read_json(os.path.join(workdir, 'summary.json'))
  assert s['runs_left'] == 0 and s['runs_trained_here'] == 3 * 4
  archived = sorted(glob.glob(os.path.join(archive, '*', '*', 'study_done.json')))
  assert len(archived) == 3 * 4 and os.path.exists(os.path.join(archive, 'vocab.sha256'))
  assert 'corpus' not in jsonio.read_json(os.path.join(os.path.dirname(archived[0]),
                                                       'run_config.json'))['data']
  # Another machine, the same archive: the vocabulary comes out the same, nothing trains,
  # and the report's figures are the first workdir's.
  work3 = str(tmp_path / 'w3')
  study.run_study(config, work3, archive=archive)
  assert not glob.glob(os.path.join(work3, 'runs', '*', '*', 'checkpoints'))
  s3 = jsonio.read_json(os.path.join(work3, 'summary.json'))
  assert s3['factorial'] == s['factorial'] and s3['effects'] == s['effects']
  # A workdir given the archive late archives the runs it finished before.
  late = str(tmp_path / 'late')
  os.rename(archive, late)
  study.run_study(config, work3, archive=archive)
  assert len(glob.glob(os.path.join(archive, '*', '*', 'study_done.json'))) == 3 * 4
  assert s['factorial']['shared+rotary']['against'] == 'standard+rotary'
  assert s['factorial']['shared+rotary']['position_embeddings'] == 'rotary'
  check = LongRun('standard', 4, 1e-3, 100, NA)
  here = jsonio.read_json(os.path.join(study_long.run_dir(workdir, check), 'study_done.json'))
  stamp = os.path.getmtime(os.path.join(study_long.run_dir(workdir, check), 'study_done.json'))
  # A second workdir reuses a 'long study' whose check run matches this one's loss.
  long = str(tmp_path / 'long.json')
  jsonio.write_json(long, {'selection_seed': 100, 'selection': {'standard@4': {'losses': {
      '0.001': here['eval_loss']}}}, 'factorial': {'standard': {'lr': 1e-3}},
      'curves': {'standard@4/seed0': [[4, 1.25]], 'standard@4/seed1': [[4, 1.5]]}})
  config.rotary.reuse_summary = long
  work2 = str(tmp_path / 'w2')
  study.run_study(config, work2)
  s2 = jsonio.read_json(os.path.join(work2, 'summary.json'))
  assert s2['reuse']['used'] and s2['reuse']['abs_diff'] <= 1e-6
  assert s2['runs_trained_here'] == 3 * 4 - 2  # Standard's seeds 0 and 1 came from 'long'.
  assert s2['factorial']['standard']['losses'] == [1.25, 1.5]
  report = open(os.path.join(work2, 'report.md')).read()
  assert '2 runs come from' in report and 'arms.png' in report
  # How busy the machine was, from the load each trained run recorded as it ended.
  assert s2['load_during']['runs'] == s2['load_during']['of'] == 3 * 4 - 2
  assert s2['load_during']['cpu_count'] == [os.cpu_count()]
  assert 'The 5-minute load average as each run ended was' in report
  config.rotary.reuse_summary = ''
  study.run_study(config, workdir)  # Resumes: nothing retrains.
  assert os.path.getmtime(os.path.join(study_long.run_dir(workdir, check),
                                       'study_done.json')) == stamp


def test_the_load_during_a_study_counts_runs_that_did_not_record_it():
  results = {1: {'load_avg_at_end': [3.0, 2.5, 2.0], 'cpu_count': 2},
             2: {'load_avg_at_end': [1.0, 2.25, 2.0], 'cpu_count': 2}, 3: {}}
  load = reporting.load_during(results.values())
  assert load == {'runs': 2, 'of': 3, 'min': 2.25, 'median': 2.375, 'max': 2.5,
                  'cpu_count': [2]}
  text = study_rotary_report.load_sentence({'load_during': load})
  assert text == (' The 5-minute load average as each run ended was 2.25–2.50 (median 2.38) '
                  'on 2 cores, over 2 of the 3 runs (the others finished before the study '
                  'recorded it).')
  assert study_rotary_report.load_sentence({'load_during': reporting.load_during([{}])}) == ''


def test_the_1000_step_point_is_re_read_at_another_rate_beside_the_long_study(tmp_path):
  path = str(tmp_path / 'long.json')
  jsonio.write_json(path, {
      'selection_seed': 100, 'selection': {'standard@2000': {'losses': {'0.004': 3.98}}},
      'horizon': {
      'standard': {'1000': {'lr': 4e-3, 'seeds': [0, 1, 2], 'losses': [5.1, 5.2, 5.3]}},
      'shared': {'1000': {'lr': 4e-3, 'init': 'normal', 'seeds': [0, 1, 2],
                          'losses': [5.0, 5.3, 5.3]}}}})
  config = _config(reuse_summary=path)
  runs = study_rotary.reread_runs(config)
  assert runs == [LongRun('standard', 1000, 2e-3, s, NA) for s in (0, 1, 2)]
  ready, _, _ = study_rotary.plan(config, {})
  assert ready[1:4] == runs  # Right after the reuse check: they are short.
  trained = {r: {'eval_loss': x} for r, x in zip(runs, (4.7, 4.9, 4.9))}
  s = study_rotary.reread_summary(config, trained)
  assert s['long_losses'] == {'0': 5.1, '1': 5.2, '2': 5.3}
  assert s['gap_at_long_lr']['per_seed'] == pytest.approx([-0.1, 0.1, 0.0])
  assert s['rates']['0.002']['losses'] == {'0': 4.7, '1': 4.9, '2': 4.9}
  assert s['rates']['0.002']['gap']['per_seed'] == pytest.approx([0.3, 0.4, 0.4])
  assert s['rates']['0.002']['gap']['delta_nats'] == pytest.approx(1.1 / 3)
  text = '\n'.join(study_rotary_report.reread_section({'reread': s}))
  assert 'at 0.004 (the long study\'s choice, on its seed 100) 5.100 / 5.200 / 5.300' in text
  assert 'At 0.002 (trained here): `standard` 4.700 / 4.900 / 4.900; `shared` minus `standard` +0.367' in text


def test_the_device_preset_has_the_same_arms_and_selection_and_runs_at_toy_size(tmp_path):
  """gpu_long: cpu_rotary's arms, selection seeds and init at BERT-small; shrunk to a toy
  model on CPU here, three arms run end to end, then a rerun that trains nothing."""
  gpu, cpu = _config('gpu_long'), _config()
  assert gpu.design == 'rotary' and tuple(gpu.rotary.arms) == tuple(cpu.rotary.arms)
  assert tuple(gpu.rotary.selection_seeds) == tuple(cpu.rotary.selection_seeds)
  assert len(gpu.rotary.lrs) >= 2
  assert gpu.pretrain.override.model.diag_init_scheme == cpu.pretrain.override.model.diag_init_scheme
  cfg = study_rotary.run_config(gpu, LongRun('shared+rotary', 1000, 1e-3, 0, NA))
  assert (cfg.model.num_layers, cfg.model.hidden_size, cfg.data.seq_len) == (4, 256, 128)
  assert cfg.model.dtype == 'bfloat16' and cfg.model.position_embeddings == 'rotary'
  corpus, _ = _write_fixture_data(tmp_path)
  config = _config('gpu_long', arms=('standard', 'standard+rotary', 'shared+rotary'),
                   headline_arms=('standard',), steps=4, seeds=2, headline_seeds=2)
  config.long.checkpoint_every_steps = 4
  p = config.pretrain.override
  p.data.update(corpus=corpus, batch_size=8, seq_len=32, vocab_train_sentences=10_000,
                eval_fraction=0.1)
  p.model.update(num_layers=1, hidden_size=32, num_heads=2, mlp_dim=64, vocab_size=256,
                 max_position_embeddings=32, dtype='float32')
  p.eval_batches = 1
  p.log_every_steps = 2
  workdir = str(tmp_path / 'w')
  study.run_study(config, workdir)
  s = jsonio.read_json(os.path.join(workdir, 'summary.json'))
  assert s['runs_left'] == 0 and s['runs_trained_here'] == 3 * (2 * 2 + 2)
  assert s['selection']['shared+rotary']['chosen_lr'] in (1e-3, 2e-3)
  assert not s['reuse']['used'] and s['reread'] is None
  done = os.path.join(workdir, 'runs', 'shared+rotary', 's4_lr0.001_seed100_na', 'study_done.json')
  stamp = os.path.getmtime(done)
  study.run_study(config, workdir)  # Resumes: every run is finished, nothing retrains.
  assert os.path.getmtime(done) == stamp


def test_the_archive_restores_only_runs_of_the_same_config_and_vocabulary(tmp_path):
  """study_archive: a run archived with another config is left out (it trains again),
  where the data lives does not count, and an archive of another vocabulary is refused."""
  from sharedbert.lab import study_archive
  config = _config()
  run = LongRun('shared', 2000, 2e-3, 100, NA)
  cfg = study_rotary.run_config(config, run).to_dict()
  archive = str(tmp_path / 'archive')
  study_archive.save(archive, run.variant, run.tag, cfg, {'eval_loss': 4.5})
  other = LongRun('shared', 2000, 4e-3, 100, NA)
  stale = study_rotary.run_config(config, run).to_dict()
  stale['optim']['lr'] = 8e-3  # Archived under 4e-3's tag, trained at another rate.
  study_archive.save(archive, other.variant, other.tag, stale, {'eval_loss': 9.0})
  moved = study_rotary.run_config(config, run).to_dict()
  moved['data']['corpus'] = '/elsewhere/corpus'
  assert study_archive.same_training(cfg, moved)
  assert not study_archive.same_training(cfg, stale)
  workdir = str(tmp_path / 'w')

  def config_of(variant, tag):
    r = study_long.parse_tag(variant, tag)
    return study_rotary.run_config(config, r).to_dict()

  n = study_archive.restore(archive, config_of,
                            lambda v, t: os.path.join(workdir, 'runs', v, t))
  assert n == 1
  assert study_long.load_results(workdir) == {run: {'eval_loss': 4.5}}
  vocab = tmp_path / 'vocab.model'
  vocab.write_bytes(b'one')
  study_archive.check_vocab(archive, str(vocab))  # A new archive records it.
  study_archive.check_vocab(archive, str(vocab))
  vocab.write_bytes(b'another')
  with pytest.raises(UserError, match='another vocabulary'):
    study_archive.check_vocab(archive, str(vocab))


def test_the_archive_is_refused_by_a_study_that_reopens_checkpoints(tmp_path):
  config = load_config_file(os.path.join(study_plan.REPO_CONFIGS, 'study.py'),
                            'cpu_long,data=/x')
  with pytest.raises(UserError, match='rotary study'):
    study.run_study(config, str(tmp_path / 'w'), archive=str(tmp_path / 'a'))
