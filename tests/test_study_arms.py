"""The study's pretraining arms (seeds, sweep, inits, widths), its linear probes and its
lead report: the plan and the statistics on made-up results, then a toy run end to end
with two worker processes, killed and resumed."""

import dataclasses
import json
import os

import numpy as np
import pytest

from sharedbert.lab import study
from sharedbert.lab import study_plan
from sharedbert.lab import study_linear
from sharedbert.lab import study_pretrain as sp
from sharedbert.lab import study_pretrain_report as spr
from sharedbert.errors import UserError

from test_study import _toy_config, _write_fixture_data


def _arms_config(tmp_path, **pretrain):
  corpus, glue_dir = _write_fixture_data(tmp_path)
  config = _toy_config(corpus, glue_dir)
  config.pretrain.override.model.diag_init_scheme = 'constant'  # As the cpu preset pins it.
  config.pretrain.update(dict(seeds=2, lrs=(1e-3,), inits=('constant', 'signs'), widths=(16,),
                              width_seeds=2, workers=1), **pretrain)
  return config


def test_plan_runs_each_setting_once_and_keeps_the_reference_where_glue_reads_it(tmp_path):
  config = _arms_config(tmp_path)
  ref = sp.reference(config, 'shared')
  assert ref == sp.Run('shared', 2e-3, 0, 32, 'constant')
  a = sp.phase_a(config, ['standard', 'shared'])
  # References, the sweep's other rate, shared's other init: no run twice.
  assert a == [sp.reference(config, 'standard'), ref,
               dataclasses.replace(sp.reference(config, 'standard'), lr=1e-3),
               dataclasses.replace(ref, lr=1e-3), dataclasses.replace(ref, init='signs')]
  assert sp.run_dir(config, '/w', ref) == study_plan.pretrain_dir('/w', 'shared')
  assert sp.run_dir(config, '/w', a[3]) == '/w/pretrain_runs/shared/lr0.001_seed0_d32_constant'
  # Phase B: each variant at its chosen rate and init: seeds, then every width x width seed.
  fake = {r: {'eval_loss': x} for r, x in zip(a, [3.0, 4.0, 3.5, 3.9, 3.8])}
  chosen = sp.choose(config, ['standard', 'shared'], fake)
  assert chosen['standard'] == sp.reference(config, 'standard')
  assert chosen['shared'] == sp.Run('shared', 1e-3, 0, 32, 'signs')
  b = sp.phase_b(config, ['standard', 'shared'], chosen)
  assert dataclasses.replace(chosen['shared'], seed=1) in b
  assert sum(r.width == 16 for r in b) == 4 and len(b) == len(set(b)) == 8


def test_run_config_sets_rate_seed_init_and_width_with_the_recipes_init_scale(tmp_path):
  config = _arms_config(tmp_path)
  cfg = sp.run_config(config, sp.Run('shared', 4e-3, 2, 64, 'normal'))
  assert (cfg.optim.lr, cfg.seed, cfg.model.diag_init_scheme) == (4e-3, 2, 'normal')
  assert (cfg.model.hidden_size, cfg.model.mlp_dim, cfg.model.num_heads) == (64, 128, 2)
  assert cfg.model.initializer_range == round(0.7 / 64 ** 0.5, 4)
  assert config.pretrain.override.seed == 0  # The study's own config is untouched.
  with pytest.raises(UserError, match='pretrain.widths: 33 is not a multiple of the 2 heads'):
    sp.run_config(config, sp.Run('shared', 4e-3, 0, 33, 'constant'))


def test_extrapolation_of_an_exact_line_and_its_interval():
  gaps = {str(w): {'delta_nats': 0.9 - 0.1 * np.log2(w)} for w in (64, 128, 256)}
  e = sp.extrapolate(gaps, 1024)
  assert e['slope_per_doubling'] == pytest.approx(-0.1)
  assert e['value'] == pytest.approx(0.9 - 1.0)
  assert e['ci_high'] - e['ci_low'] == pytest.approx(0, abs=1e-9)
  gaps['128']['delta_nats'] += 0.05  # Off the line: the interval opens.
  e = sp.extrapolate(gaps, 1024)
  assert e['ci_low'] < e['value'] < e['ci_high']
  assert sp.extrapolate({'64': {'delta_nats': 1.0}, '128': {'delta_nats': 0.5}}) is None


def test_loss_at_equal_flops_reads_the_curve_between_evaluations():
  s = {'train_step_flops': 10, 'eval_curve': [[100, 5.0], [200, 4.0]]}
  assert sp._loss_at_flops(s, 1500) == pytest.approx(4.5)
  assert sp._loss_at_flops(s, 2500) is None and sp._loss_at_flops(s, 500) is None


def test_linear_probe_finds_a_linear_signal_and_picks_the_penalty_on_training_data():
  from sharedbert.data import glue
  from sharedbert.evaluators import linear_probe
  rng = np.random.default_rng(0)
  x = rng.standard_normal((600, 16))
  labels = (x[:, 0] + 0.1 * rng.standard_normal(600) > 0).astype(int)
  r = linear_probe.probe(glue.get_task('sst2'), x[:400], labels[:400], x[400:], labels[400:])
  assert r['score'] > 0.9 and set(r['selection']) == {f'{l:g}' for l in linear_probe.LAMBDAS}
  noise = rng.standard_normal((600, 16))  # Features that carry nothing: chance.
  r = linear_probe.probe(glue.get_task('sst2'), noise[:400], labels[:400], noise[400:],
                         labels[400:])
  assert 0.3 < r['score'] < 0.7
  y = 2.5 + x[:, 1] + 0.05 * rng.standard_normal(600)
  r = linear_probe.probe(glue.get_task('stsb'), x[:400], y[:400], x[400:], y[400:])
  assert r['score'] > 0.95


def test_toy_arms_end_to_end_with_two_workers_killed_and_resumed(tmp_path, monkeypatch):
  config = _arms_config(tmp_path, workers=2)
  config.glue.tasks = 'mrpc'
  config.glue.pretrain_seeds = 2  # GLUE from both phase-B seeds: hierarchical intervals.
  config.seeds = 1
  config.baselines = ()
  config.robustness.tasks = ()
  config.crossdomain.pairs = ()
  workdir = str(tmp_path / 'study')
  variants = ['standard', 'shared']

  # Killed after phase A: phase B's runs are not there; the rerun does them alone.
  original = sp.choose
  monkeypatch.setattr(sp, 'choose', lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
  with pytest.raises(KeyboardInterrupt):
    study.run_study(config, workdir)
  monkeypatch.setattr(sp, 'choose', original)
  a = sp.phase_a(config, variants)
  done = {r: os.path.getmtime(os.path.join(sp.run_dir(config, workdir, r), 'study_done.json'))
          for r in a}
  study.run_study(config, workdir)
  for r, t in done.items():
    assert os.path.getmtime(os.path.join(sp.run_dir(config, workdir, r), 'study_done.json')) == t

  summary = json.load(open(os.path.join(workdir, 'summary.json')))
  p = summary['pretraining']
  for v in ('shared',):
    e = p['verdict'][v]
    assert e['seeds'] == 2 and e['verdict'] in ('better', 'worse', 'equivalent', 'undecided')
    assert e['ci_low'] <= e['delta_nats'] <= e['ci_high']
    losses = p['losses_by_seed']
    assert e['delta_nats'] == pytest.approx(np.mean(
        [losses[v][s] - losses['standard'][s] for s in ('0', '1')]))
  assert set(p['lr_sweep']['standard']) == {'0.001', '0.002'}
  assert set(p['init']) == {'constant', 'signs'}
  assert p['init']['constant']['self_attention_share_step0'] > (
      p['init']['signs']['self_attention_share_step0'])
  assert p['scored_tokens'] > 0 and p['reference']['standard']['eval_loss'] > 0
  for v in variants:
    for w in ('16', '32'):
      s = summary['scaling'][v][w]
      assert s['seeds'] == 2 and s['non_embedding_params'] > 0 and s['train_flops'] > 0
    assert summary['scaling'][v]['16']['non_embedding_params'] < (
        summary['scaling'][v]['32']['non_embedding_params'])
  assert summary['scaling']['shared']['32']['train_flops'] < (
      summary['scaling']['standard']['32']['train_flops'])
  assert set(p['equal_flops']['shared']) >= {'train_flops', 'delta_nats', 'ci_low', 'ci_high'}
  # Seed s: the same batches for every variant (the same rows, in the same order).
  rows = {}
  for v in variants:
    run = dataclasses.replace(sp.choose(config, variants, sp.load_results(
        config, workdir, variants))[v], seed=1)
    cfg = sp.run_config(config, run)
    from sharedbert.data.pretrain import PretrainData
    data = PretrainData(cfg, os.path.join(sp.run_dir(config, workdir, run), 'vocab.model'))
    rows[v] = data.train.batch(3)['input_ids']
  np.testing.assert_array_equal(rows['standard'], rows['shared'])
  # Linear probes: every pretraining seed of every variant, and `none`.
  lin = summary['linear_probes']
  assert set(lin['rows']) == {'standard', 'shared', 'none'}
  assert len(lin['rows']['shared']['mrpc']['per_seed']) == 2
  assert set(lin['vs_standard']) == {'shared', 'none'}
  text = open(os.path.join(workdir, 'report.md')).read()
  for needle in ('## Pretraining verdict', '### Learning-rate sweep', '### Scaling with width',
                 '### Equal compute', '## GLUE by linear probes on frozen encoders',
                 '![held-out loss against non-embedding parameters and training FLOPs]'
                 '(scaling.png)', spr.verdict_sentence(p)):
    assert needle in text, needle
  assert text.index('## Pretraining verdict') < text.index('## GLUE (fine-tuning')
  assert os.path.getsize(os.path.join(workdir, 'scaling.png')) > 1000
  assert os.path.exists(study_linear.result_file(workdir, 'none', 'mrpc', 1))
  # GLUE fine-tuned each phase-B seed's encoder at the variant's chosen rate.
  assert summary['glue_intervals'].startswith('hierarchical')
  chosen = sp.choose(config, variants, sp.load_results(config, workdir, variants))
  for v in variants:
    g = summary['glue'][v]['mrpc']
    assert g['pretrain_seeds'] == 2 and g['finetune_seeds'] == 1 and g['seeds'] == [0, 1]
    for s in (0, 1):
      record = json.load(open(study_plan.run_file(workdir, v, 'mrpc', 0, s)))
      assert record['pretrain_seed'] == s
      assert record['init_from'].endswith(os.path.basename(sp.run_dir(
          config, workdir, dataclasses.replace(chosen[v], seed=s))))
    assert g['per_seed'] == [json.load(open(study_plan.run_file(workdir, v, 'mrpc', 0, s)))['score']
                             for s in (0, 1)]
  assert 'hierarchical bootstrap interval' in text


def test_linear_probe_average_leaves_out_wnli_as_the_fine_tuning_average_does(tmp_path):
  """One meaning of "average" in the report: WNLI is shown but not averaged, in the probes
  as in fine-tuning (study_stats.AVERAGE_EXCLUDES)."""
  import ml_collections
  from sharedbert.utils import jsonio
  config = ml_collections.ConfigDict({'linear_probe': {'tasks': 'auto'},
                                      'pretrain': {'seeds': 2}})
  scores = {'mrpc': (0.7, 0.8), 'sst2': (0.5, 0.6), 'wnli': (0.1, 0.1)}
  for row in ('standard', 'shared', 'none'):
    for task, per_seed in scores.items():
      for seed, x in enumerate(per_seed):
        jsonio.write_json(study_linear.result_file(str(tmp_path), row, task, seed),
                          {'score': x + (0.05 if row == 'shared' else 0.0)})
  a = study_linear.analyse(config, str(tmp_path), ['standard', 'shared'], list(scores))
  assert a['averaged_tasks'] == ['mrpc', 'sst2']
  assert a['rows']['standard']['_average']['mean'] == pytest.approx((0.7 + 0.8 + 0.5 + 0.6) / 4)
  assert a['vs_standard']['shared']['_average']['diff'] == pytest.approx(0.05)
  text = '\n'.join(study_linear.section(a))
  assert 'WNLI left out' in text


def test_the_bottom_pretraining_table_says_it_shows_the_reference_runs():
  from sharedbert.lab import study_report
  text = study_report.reference_runs_sentence(
      {'standard': {'lr': 2e-3, 'seed': 0, 'init': 'constant'},
       'shared': {'lr': 2e-3, 'seed': 0, 'init': 'constant'}}, ['standard', 'shared'])
  assert 'reference runs' in text and 'standard seed 0 at lr 0.002;' in text
  assert 'shared seed 0 at lr 0.002, constant diagonals' in text
