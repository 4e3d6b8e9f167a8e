"""The controlled study end to end at toy size (2 variants x 2 seeds), and its resume."""

import json
import os
import random

import ml_collections
import numpy as np
import pytest

from sharedbert.lab import study
from sharedbert.lab import study_plan
from sharedbert.lab import study_stats
from sharedbert.errors import UserError

_WORDS = ('the cat dog man woman sat ran on a mat house big small red blue good bad film '
          'movie great awful happy sad saw walked into garden city river').split()


class _Killed(Exception):
  pass


def _sentence(rng, n=None):
  return ' '.join(rng.choice(_WORDS) for _ in range(n or rng.randint(3, 8))) + ' .'


def _write_fixture_data(root):
  """A tiny corpus and glue_data folder (MRPC, STS-B; RTE with a dev set only) written by
  the test."""
  rng = random.Random(0)
  corpus = root / 'corpus'
  corpus.mkdir()
  (corpus / 'text.txt').write_text('\n\n'.join(
      ' '.join(_sentence(rng) for _ in range(6)) for _ in range(80)))
  glue_dir = root / 'glue'
  for name in ('MRPC', 'STS-B', 'RTE'):
    (glue_dir / name).mkdir(parents=True)
  # RTE as in a download of the dev set only: the study skips it (no train.tsv).
  (glue_dir / 'RTE' / 'dev.tsv').write_text(
      'index\tsentence1\tsentence2\tlabel\n0\ta cat .\ta dog .\tnot_entailment\n')
  def pairs(n):
    out = []
    for i in range(n):
      a = _sentence(rng)
      same = rng.random() < 0.5
      out.append((i, a, a if same else _sentence(rng), same))
    return out
  mrpc_header = 'Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n'
  for split, n in (('train', 48), ('dev', 24)):
    (glue_dir / 'MRPC' / f'{split}.tsv').write_text(mrpc_header + ''.join(
        f'{int(s)}\t{i}\t{i + 1000}\t{a}\t{b}\n' for i, a, b, s in pairs(n)))
  sts_header = ('index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t'
                'sentence2\tscore\n')
  for split, n in (('train', 48), ('dev', 24)):
    (glue_dir / 'STS-B' / f'{split}.tsv').write_text(sts_header + ''.join(
        f'{i}\tg\tf\ty\t{i}\tn\tn\t{a}\t{b}\t{(4.5 if s else rng.uniform(0, 3)):.3f}\n'
        for i, a, b, s in pairs(n)))
  return str(corpus), str(glue_dir)


def _toy_config(corpus, glue_dir):
  import ml_collections
  from sharedbert.models.params import load_config_file
  config = load_config_file(os.path.join(study_plan.REPO_CONFIGS, 'study.py'), 'cpu')
  config.variants = ('standard', 'shared')
  config.seeds = 2
  config.bootstrap_resamples = 50
  # The reference runs only (tests/test_study_arms.py runs the arms).
  config.pretrain.update(seeds=1, lrs=(), inits=(), widths=(), workers=1)
  config.glue.pretrain_seeds = 0  # GLUE from the reference runs (test_study_arms: seeds).
  config.linear_probe.max_train_examples = 40
  p = config.pretrain.override
  p.data.corpus = corpus
  p.data.batch_size = 8
  p.data.seq_len = 32
  p.data.vocab_train_sentences = 10_000
  p.total_steps = 6
  p.log_every_steps = 2
  p.eval_every_steps = 3
  p.eval_batches = 1
  p.ckpt.every_steps = 6
  p.model = ml_collections.ConfigDict(dict(
      num_layers=1, hidden_size=32, num_heads=2, mlp_dim=64, vocab_size=256,
      max_position_embeddings=64, dropout_rate=0.0, attention_dropout_rate=0.0))
  p.data.max_predictions = 4
  g = config.glue.override
  g.data.glue_dir = glue_dir
  g.data.seq_len = 32
  g.data.max_train_examples = 40
  g.num_epochs = 2
  g.batch_size = 8
  g.eval.batch_size = 16
  g.eval.bootstrap_resamples = 20
  config.robustness.tasks = ('mrpc',)
  config.robustness.levels = (0.0, 0.3)
  config.robustness.noise_seeds = 2
  config.robustness.eval_batch_size = 16
  return config


def test_merge_overrides_refuses_unknown_keys():
  import ml_collections
  base = ml_collections.ConfigDict({'a': 1, 'b': {'c': 2}})
  study_plan.merge_overrides(base, {'b': {'c': 3}}, 'x')
  assert base.b.c == 3
  with pytest.raises(UserError, match=r'x\.b\.nope is not a key'):
    study_plan.merge_overrides(base, {'b': {'nope': 1}}, 'x')


def test_study_presets_resolve():
  from sharedbert.models.params import load_config_file
  for preset in ('cpu', 'gpu', 'pod'):
    config = load_config_file(os.path.join(study_plan.REPO_CONFIGS, 'study.py'), preset)
    for v in config.variants:
      cfg = study_plan.pretrain_config(config, v)
      assert cfg.model.attention == v
    g = study_plan.glue_config(config, '/nowhere', 'cola')
    assert g.seeds == config.seeds and not g.eval.select_best_epoch


@pytest.mark.parametrize('change, message', [
    (lambda c: c.update(seeds=0), r'^seeds must be a positive integer, got 0$'),
    (lambda c: c.pretrain.override.data.update(batch_size=-4),
     r'^data\.batch_size must be a positive integer, got -4$'),
    (lambda c: c.glue.override.update(num_epochs=0),
     r'^num_epochs must be a positive integer, got 0$'),
    (lambda c: c.robustness.update(levels=(0.0, -0.1)),
     r'^robustness\.levels\[1\] must be a finite number >= 0, got -0\.1$'),
    (lambda c: c.glue.update(tasks='mrpc,cola'),
     r'GLUE task directory missing: .*CoLA/train\.tsv not found'),
    (lambda c: c.glue.update(tasks='rte'), r'RTE/train\.tsv not found'),
    (lambda c: c.update(baselines=('nothing',)),
     r"^config\.baselines lists \['nothing'\]; known: none"),
    (lambda c: c.update(variants=('shared',)),
     r"'none' fine-tunes the 'standard' architecture .* needs 'standard' in config\.variants"),
    (lambda c: c.update(equivalence_margin=0.0),
     r'^equivalence_margin must be a finite number > 0, got 0\.0$'),
    (lambda c: c.glue.override.data.update(glue_dir=''),
     r"glue\.tasks='auto' finds the tasks in glue\.override\.data\.glue_dir, which is not set"),
])
def test_study_inputs_are_checked_before_anything_is_written(tmp_path, change, message):
  corpus, glue_dir = _write_fixture_data(tmp_path)
  config = _toy_config(corpus, glue_dir)
  change(config)
  workdir = tmp_path / 'study'
  with pytest.raises(UserError, match=message):
    study.run_study(config, str(workdir))
  assert not workdir.exists()


def test_paired_difference_and_t_interval():
  a = {'mean': 0.6, 'per_seed': [0.6, 0.62, 0.58], 'seeds': [0, 1, 2],
       'dist': np.array([0.6, 0.61, 0.59, 0.6])}
  b = {'mean': 0.5, 'per_seed': [0.5, 0.51, 0.49], 'seeds': [0, 1, 2],
       'dist': np.array([0.5, 0.5, 0.5, 0.5])}
  d = study_stats.paired_difference(a, b, 0.95)
  assert d['diff'] == pytest.approx(0.1)
  np.testing.assert_allclose(d['per_seed'], [0.1, 0.11, 0.09])
  # t interval of [0.1, 0.11, 0.09]: mean 0.1, std 0.01, t(0.975, 2) = 4.3027.
  half = 4.302652729911275 * 0.01 / np.sqrt(3)
  assert d['t_ci'] == pytest.approx((0.1 - half, 0.1 + half))
  assert d['reliable']
  # The equivalence test's intervals are the 90% ones: t(0.95, 2) = 2.92.
  half90 = 2.919985580355516 * 0.01 / np.sqrt(3)
  assert d['t_ci_tost'] == pytest.approx((0.1 - half90, 0.1 + half90))
  assert d['boot_ci_tost'][0] >= d['boot_ci'][0] and d['boot_ci_tost'][1] <= d['boot_ci'][1]


def _diff(boot, t, boot90=None, t90=None):
  return {'boot_ci': boot, 't_ci': t, 'boot_ci_tost': boot90 or boot, 't_ci_tost': t90 or t}


@pytest.mark.parametrize('d, expected', [
    (_diff((0.001, 0.02), (0.002, 0.03)), 'better'),
    (_diff((-0.02, -0.001), (-0.03, -0.002)), 'worse'),
    # One interval excludes 0, the other does not: not better, and too wide to be equivalent.
    (_diff((0.001, 0.02), (-0.01, 0.03)), 'undecided'),
    # Both 90% intervals inside (-0.01, 0.01): equivalent, though the 95% ones reach out.
    (_diff((-0.012, 0.011), (-0.02, 0.02), (-0.009, 0.008), (-0.0099, 0.0099)), 'equivalent'),
    # The TOST edge: an interval that reaches the margin exactly is not inside it.
    (_diff((-0.02, 0.02), (-0.02, 0.02), (-0.005, 0.005), (-0.01, 0.005)), 'undecided'),
    (_diff((-0.02, 0.02), (-0.02, 0.02), (-0.005, 0.01), (-0.005, 0.005)), 'undecided'),
    # Only the bootstrap interval is inside: both are required.
    (_diff((-0.02, 0.02), (-0.05, 0.05), (-0.005, 0.005), (-0.03, 0.03)), 'undecided'),
    # A small but reliable difference is called better even inside the margin.
    (_diff((0.001, 0.004), (0.001, 0.005)), 'better'),
    # One seed: no t interval, no call.
    (_diff((0.001, 0.02), (float('nan'), float('nan'))), 'undecided'),
])
def test_verdict(d, expected):
  assert study_stats.verdict(d, 0.01) == expected


def test_verdict_text_and_headline():
  assert study_stats.verdict_text('equivalent', 0.01) == 'equivalent within ±1 point'
  assert study_stats.verdict_text('equivalent', 0.005) == 'equivalent within ±0.5 points'
  better = _diff((0.1, 0.2), (0.1, 0.3))
  flat = _diff((-0.1, 0.2), (-0.1, 0.3))
  gains = {'cola': {'majority': better, 'none': better},
           'sst2': {'majority': better, 'none': flat},
           'wnli': {'majority': flat, 'none': flat},
           '_average': {'majority': better, 'none': better}}
  verdicts = {'shared': {'cola': 'equivalent', 'sst2': 'undecided', 'wnli': 'worse',
                         '_average': 'equivalent'},
              'pairwise': {'cola': 'worse', 'sst2': 'worse', '_average': 'worse'}}
  (text, _) = study_stats.headline(verdicts, gains, 'standard', ['none'], 0.01,
                                    ['cola', 'sst2'])
  assert text == (
      '**Verdict.** Against `standard` on the average over CoLA, SST-2: `shared` is '
      'equivalent within ±1 point (per task: 1 equivalent, 1 undecided); `pairwise` is worse '
      '(per task: 2 worse). Pretrained `standard` is reliably better than both the majority '
      'class and the no-pretraining baseline `none` on 1 of 2 tasks (CoLA); than the '
      'majority class on 2, than the no-pretraining baseline `none` on 1 (WNLI not counted, '
      'as in the average).')
  # Without baselines: the majority class alone.
  assert study_stats.gains_sentence({'cola': {'majority': better}}, 'standard', []) == (
      'Pretrained `standard` is reliably better than the majority class on 1 of 1 task (CoLA).')


def _fake_runs(task, labels, predictions):
  from sharedbert.data import glue
  from sharedbert.metrics import glue as glue_metrics
  spec = glue.get_task(task)
  major = int(np.bincount(labels).argmax())
  major_score = glue_metrics.task_score(spec, glue_metrics.task_metrics(
      spec, np.full(len(labels), major), np.asarray(labels)))
  return [{'seed': s, 'labels': labels, 'predictions': p, 'majority_prediction': major,
           'majority_baseline': major_score,
           'score': glue_metrics.task_score(spec, glue_metrics.task_metrics(
               spec, np.asarray(p), np.asarray(labels)))}
          for s, p in enumerate(predictions)]


def test_average_leaves_out_wnli_and_majority_shares_the_resamples():
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 2, 60).tolist()
  labels[:40] = [1] * 40  # Majority: 1.
  majority_like = [[1] * 60, [1] * 60]
  noisy = [rng.integers(0, 2, 60).tolist() for _ in range(2)]
  runs = {'standard': {'sst2': _fake_runs('sst2', labels, majority_like),
                       'wnli': _fake_runs('wnli', labels, noisy)}}
  table = study_stats.glue_tables(runs, ['standard'], ['sst2', 'wnli'], 0.95, 200)
  assert table['standard']['_average']['tasks'] == ['sst2']
  assert table['standard']['_average']['mean'] == pytest.approx(table['standard']['sst2']['mean'])
  gains, majority = study_stats.pretraining_gains(
      runs, table, 'standard', [], ['sst2', 'wnli', '_average'], 0.95, 200)
  # Predicting the majority label on every example: exactly the majority class on every
  # resample (the same resamples), so a zero difference with a zero-width interval.
  d = gains['sst2']['majority']
  assert d['diff'] == 0 and d['boot_ci'] == (0, 0) and not study_stats.reliably_better(d)
  assert majority['_average']['mean'] == pytest.approx(majority['sst2']['mean'])
  assert set(gains) == {'sst2', 'wnli', '_average'}


def _glue_task_files(root, task_files):
  for folder, files in task_files.items():
    (root / folder).mkdir(parents=True)
    for name in files:
      (root / folder / name).write_text('x\n')


def test_glue_task_discovery_skips_tasks_without_train_or_dev(tmp_path):
  _glue_task_files(tmp_path, {
      'CoLA': ['train.tsv', 'dev.tsv', 'test.tsv'], 'RTE': ['dev.tsv'],
      'QNLI': ['train.tsv'], 'MNLI': ['train.tsv', 'dev_matched.tsv'],
      'WNLI': ['train.tsv', 'dev.tsv'], 'notes': ['readme.txt']})
  tasks, skipped = study_plan.discover_glue_tasks(str(tmp_path))
  assert tasks == ['cola', 'wnli']
  assert skipped == [('mnli', 'no dev_mismatched.tsv'), ('qnli', 'no dev.tsv'),
                     ('rte', 'no train.tsv')]
  config = _toy_config('corpus', str(tmp_path))
  assert study_plan.resolve_glue_tasks(config) == (tasks, skipped)
  config.glue.tasks = 'SST-2, cola,sst2'  # Names, in any spelling: no discovery.
  assert study_plan.resolve_glue_tasks(config) == (['sst2', 'cola'], [])
  # Only RTE's dev set: nothing to train.
  only_dev = tmp_path / 'only_dev'
  _glue_task_files(only_dev, {'RTE': ['dev.tsv']})
  config = _toy_config('corpus', str(only_dev))
  with pytest.raises(UserError, match=r"found no task with a train\.tsv and a dev\.tsv in "
                     r".*only_dev \(rte: no train\.tsv\)"):
    study_plan.resolve_glue_tasks(config)
  # Cross-domain pairs need their source fine-tuned and their target's dev file.
  run, skipped_pairs = study_plan.crossdomain_plan(config, ['mrpc'])
  assert [t.name for t in run] == []
  assert dict(skipped_pairs)['mrpc->qqp'] == 'no QQP/dev.tsv in the GLUE data'
  assert dict(skipped_pairs)['mnli->rte'] == 'its source mnli is not fine-tuned in this study'


def test_cpu_preset_budget_recipe_follows_the_width():
  from sharedbert.models.params import load_config_file
  config = load_config_file(os.path.join(study_plan.REPO_CONFIGS, 'study.py'), 'cpu')
  assert config.pretrain.arg == 'size=tiny,recipe=budget' and config.glue.tasks == 'auto'
  assert config.baselines == ('none',)
  cfg = study_plan.pretrain_config(config, 'standard')
  assert cfg.model.hidden_size == 128 and cfg.model.pre_layer_norm and cfg.data.seq_len == 32
  assert cfg.model.initializer_range == round(0.7 / 128 ** 0.5, 4)
  assert cfg.data.mask_rate == 0.4 and cfg.optim.lr == 2e-3
  # A width set in the study's overrides gets the recipe's init for that width...
  config.pretrain.override.model = ml_collections.ConfigDict(dict(hidden_size=64, num_heads=2,
                                                                  mlp_dim=256))
  assert study_plan.pretrain_config(config, 'standard').model.initializer_range == round(0.7 / 8, 4)
  config.pretrain.override.model.initializer_range = 0.05  # ...and an explicit value wins.
  assert study_plan.pretrain_config(config, 'standard').model.initializer_range == 0.05


def test_paths_are_never_absolute(tmp_path):
  from sharedbert.utils import paths
  root, work = '/r/repo', '/w/study'
  assert paths.display('/r/repo/docs/x', workdir=work, root=root) == 'docs/x'
  assert paths.display('/r/data', workdir=work, root=root) == '../data'
  assert paths.display('/w/study/data', workdir=work, root=root) == 'W/data'
  assert paths.display('/w/data/corpus', workdir=work, root=root) == 'W/../data/corpus'
  for given in ('../data', 'demo', 'tfds:wikipedia/20230601.en', 'gs://b/x', ''):
    assert paths.display(given, workdir=work, root=root) == given
  venv = os.path.join(os.path.dirname(paths.REPO_ROOT), 'hfvenv', 'bin', 'python')
  assert paths.display_command(['--hf_python=' + venv, '--out_json',
                                os.path.join(paths.REPO_ROOT, 'bench', 'x.json')]) == (
      '--hf_python=../hfvenv/bin/python --out_json bench/x.json')


def test_toy_study_end_to_end_and_resume(tmp_path, monkeypatch):
  corpus, glue_dir = _write_fixture_data(tmp_path)
  config = _toy_config(corpus, glue_dir)
  workdir = str(tmp_path / 'study')

  # A study killed in the middle: the second (variant, task) fine-tuning dies.
  original = study.run_glue_task
  calls = []
  def dying(config, workdir, variant, task, sources):
    calls.append((variant, task))
    if len(calls) == 2:
      raise _Killed('killed')
    return original(config, workdir, variant, task, sources)
  monkeypatch.setattr(study, 'run_glue_task', dying)
  with pytest.raises(_Killed):
    study.run_study(config, workdir)
  monkeypatch.setattr(study, 'run_glue_task', original)

  # What each fine-tuned model starts from: its encoder's weights before the first step.
  import jax
  from sharedbert.tasks import glue_task
  starts = {}
  run_seed = glue_task.TaskRun.run_seed
  def spying(self, seed, **kw):
    bert = self.init_state(jax.random.key(seed), self.encoder_params).params['bert']
    starts[(os.path.basename(self.workdir), self.spec.name, seed)] = dict(
        leaves=[np.asarray(x) for x in jax.tree.leaves(bert)],
        from_scratch=self.config.from_scratch, encoder_given=self.encoder_params is not None,
        pretrained_leaves=(None if self.encoder_params is None else
                           [np.asarray(x) for x in jax.tree.leaves(self.encoder_params)]))
    return run_seed(self, seed, **kw)
  monkeypatch.setattr(glue_task.TaskRun, 'run_seed', spying)
  finished = sorted(str(p) for p in (tmp_path / 'study' / 'runs').rglob('seed_*.json'))
  # standard on mrpc, 2 seeds, then its none baseline.
  assert len(finished) == 4 and sum('/none/mrpc/' in p for p in finished) == 2
  mtimes = {p: os.path.getmtime(p) for p in finished}
  pretrain_done = {v: os.path.getmtime(os.path.join(study_plan.pretrain_dir(workdir, v),
                                                    study_plan.DONE_FILE))
                   for v in config.variants}

  # Resume: finished runs are skipped, the rest are run, the report is written.
  report_path = study.run_study(config, workdir)
  for p, t in mtimes.items():
    assert os.path.getmtime(p) == t, f'{p} was run again'
  for v, t in pretrain_done.items():
    assert os.path.getmtime(os.path.join(study_plan.pretrain_dir(workdir, v), study_plan.DONE_FILE)) == t

  # Both variants pretrained with one vocabulary and the same batches.
  vocabs = [open(os.path.join(study_plan.pretrain_dir(workdir, v), 'vocab.model'), 'rb').read()
            for v in config.variants]
  assert vocabs[0] == vocabs[1]

  tasks = ['mrpc', 'stsb']  # Found in the glue_data folder; RTE has no train.tsv.
  rows = list(config.variants) + ['none']
  runs = study_stats.load_runs(workdir, rows, tasks)
  for v in rows:
    for t in tasks:
      assert [r['seed'] for r in runs[v][t]] == [0, 1]
  # The none baseline starts from random weights; standard from its pretrained encoder.
  for seed in (0, 1):
    none, std = starts[('none', 'stsb', seed)], starts[('standard', 'stsb', seed)]
    assert none['from_scratch'] and not none['encoder_given']
    assert not std['from_scratch'] and std['encoder_given']
    for a, b in zip(std['leaves'], std['pretrained_leaves']):
      np.testing.assert_array_equal(a, b)
    assert len(none['leaves']) == len(std['leaves'])
    assert all(a.shape == b.shape for a, b in zip(none['leaves'], std['leaves']))
    assert any(a.std() > 0 and not np.allclose(a, b)
               for a, b in zip(none['leaves'], std['leaves']))
  for t in tasks:
    assert runs['none'][t][0]['from_scratch'] and runs['none'][t][0]['pretrained_step'] is None
    assert runs['standard'][t][0]['pretrained_step'] == 6
    assert not runs['standard'][t][0]['from_scratch']
    # The same training examples, hence the same majority label.
    assert (runs['none'][t][0]['majority_prediction'] ==
            runs['standard'][t][0]['majority_prediction'])
  assert not os.path.exists(study_plan.pretrain_dir(workdir, 'none'))
  r = runs['shared']['mrpc'][1]
  # Robustness: level 0 with every noise seed is the clean dev score, exactly.
  assert r['robustness']['levels'] == [0.0, 0.3]
  assert r['robustness']['scores'][0] == [r['score'], r['score']]
  assert 'robustness' not in runs['shared']['stsb'][1]
  assert 'mrpc->stsb' in r['crossdomain']
  r = runs['shared']['stsb'][1]
  assert 'stsb->mrpc' in r['crossdomain']
  e = r['crossdomain']['stsb->mrpc']
  assert e['n'] == 24 and set(e['metrics']) == {'f1', 'accuracy'}

  summary = json.load(open(os.path.join(workdir, 'summary.json')))
  for v in rows:
    for t in tasks:
      scores = [x['score'] for x in runs[v][t]]
      assert summary['glue'][v][t]['per_seed'] == pytest.approx(scores)
      assert summary['glue'][v][t]['mean'] == pytest.approx(np.mean(scores))
  assert summary['missing'] == []
  assert set(summary['paired_differences']['shared']) == {'mrpc', 'stsb', '_average'}
  assert summary['skipped_tasks'] == {'rte': 'no train.tsv'}
  assert set(summary['verdicts']['shared'].values()) <= set(study_stats.VERDICTS)
  assert set(summary['pretraining_gains']['_average']) == {'majority', 'none'}
  # Shown relative to the workdir or the repository, whichever is nearer (so the exact form
  # depends on where the test's tmp dir and the checkout are); never absolute.
  from sharedbert.utils import paths
  shown = {'corpus': paths.display(str(corpus), workdir=workdir),
           'glue_dir': paths.display(str(glue_dir), workdir=workdir)}
  assert summary['data'] == {**shown, 'tfds_data_dir': ''}
  assert not any(os.path.isabs(v) for v in shown.values())

  text = open(report_path).read()
  for needle in ('## GLUE dev scores', 'Paired differences against `standard`',
                 '## Robustness to embedding noise', '## Cross-domain transfer',
                 '## Training time', '## Parameters', 'SQuAD is not part of this preset',
                 'STS-B predicted similarity >= 4', '| none (no pretraining) |',
                 '### Verdict against `standard`', 'δ = 1 point',
                 'What pretraining buys: `standard` against the majority class and `none`',
                 'GLUE task skipped: RTE: no train.tsv.',
                 'Cross-domain pair not run: mrpc->qqp: no QQP/dev.tsv in the GLUE data.',
                 f'corpus `{shown["corpus"]}`'):
    assert needle in text, needle
  # The pretraining verdict leads; GLUE's headline follows under its own heading.
  assert text.startswith('# Controlled study of attention variants (preset `cpu`)\n\n'
                         '## Pretraining verdict\n\n**Headline.** No pretraining verdict yet: '
                         'it needs at least 2 finished seeds')
  assert summary['headline'] in text.split('## GLUE (fine-tuning the reference runs)')[1]
  assert summary['headline'].startswith('**Verdict.** Against `standard` on the average over '
                                        'MRPC, STS-B: `shared` is ')
  assert 'reliably better than both the majority class and the no-pretraining' in text
  # No machine path in what a study commits.
  for name in ('report.md', 'summary.json'):
    content = open(os.path.join(workdir, name)).read()
    for path in (str(tmp_path), os.getcwd(), os.path.dirname(study_plan.REPO_CONFIGS), '/work/'):
      assert path not in content, (name, path)
  for png in ('pretraining.png', 'glue.png', 'robustness.png', 'time.png'):
    assert os.path.getsize(os.path.join(workdir, png)) > 1000

  # A third run has nothing to do but the report.
  before = {p: os.path.getmtime(p) for p in
            (str(p) for p in (tmp_path / 'study' / 'runs').rglob('seed_*.json'))}
  study.run_study(config, workdir)
  assert before == {p: os.path.getmtime(p) for p in before}
