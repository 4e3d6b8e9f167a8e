r"""Uptraining: how much of a real encoder shared attention keeps once training continues.

  sharedbert uptrain --encoder=HF_DIR --data=DATA --workdir=W [--config=configs/uptrain.py:cpu]
      [--summary=docs/uptrain_cpu/summary.json]

configs/uptrain.py says what each key does. Steps, each skipped when its result exists (a
killed run resumes where it stopped; a finished one only rewrites the report):
  0. W/conversion: sharedbert conversion (every fit scored zero-shot; `config.conversion`).
  1. W/init/<arm>: the encoder imported (original), converted to shared attention by the
     function fit weighted by corpus text (converted), and with fresh attention (fresh).
  2. Per arm, W/arms/<arm>/train: masked-LM training on DATA/corpus from W/init/<arm>, in
     chunks that end at the curve's minutes. The arm's steps per minute are measured over
     its first `calibration_steps` steps (inside the warmup); from them its schedule
     (warmup, then linear decay to 0 at `minutes`) and the step of every point are fixed,
     so a resumed arm follows the same plan. At every point: held-out MLM loss (the
     pipeline's eval split, which the fit never saw) and zero-shot STS-B dev Spearman
     (W/arms/<arm>/curve.json); at the `glue_at` minutes the checkpoint is kept in
     W/arms/<arm>/at_<minutes> (minute 0 is W/init/<arm> itself).
  3. Per kept checkpoint, W/glue/<task>/<arm>_<minutes>: `glue.task` fine-tuned with `glue.seeds`
     seeds (sharedbert.tasks.finetune), as soon as the checkpoint exists.
  4. W/summary.json (`uptrain.<arm>.<minutes>`, `uptrain.kept`), W/report.md and
     W/recovery.png. With --summary, `uptrain` is merged into that file as well.
     --report_only does step 4 alone, from what the folder holds (also while a run goes on).
Jobs (the arms' training, the fine-tuning runs) go `workers` at a time, each a process on a
core of its own; training minutes exclude compilation, evaluation and checkpoint saves.
"""

from __future__ import annotations

import os
import shutil
import time
import zlib

from absl import app
from absl import flags
from absl import logging
import numpy as np
from ml_collections import config_flags
import ml_collections

from sharedbert.errors import UserError, one_line_errors
from sharedbert.utils import jsonio
from sharedbert.utils import paths
from sharedbert.utils import reporting
from sharedbert.utils import workers as workers_lib
from sharedbert import checkpoint as checkpoint_lib
from sharedbert import config as sb_config
from sharedbert import train as train_lib
from sharedbert.convert import hf as convert_hf
from sharedbert.convert import shared as convert_shared
from sharedbert.data import glue as glue_data
from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.evaluators import common as evaluators_lib
from sharedbert.lab import conversion
from sharedbert.lab.study_stats import task_title
from sharedbert.metrics import glue as glue_metrics
from sharedbert.metrics import stats
from sharedbert.models.params import load_config_file
from sharedbert.tasks import finetune
from sharedbert.tasks.pretrained import PretrainedRun

FLAGS = flags.FLAGS
ARMS = {  # arm: (what it is, in the report's words)
    'original': 'the encoder itself (standard attention)',
    'converted': 'shared attention fitted to it (function fit, weighted by corpus text)',
    'fresh': 'shared attention freshly initialised, the rest of the encoder kept',
}
CALIBRATION_PLACEHOLDER = 10 ** 9  # The schedule's length before the arm is calibrated.
REPO_CONFIGS = os.path.join(paths.REPO_ROOT, 'configs')


def _define_flags():
  config_flags.DEFINE_config_file('config', os.path.join(REPO_CONFIGS, 'uptrain.py'),
                                  'The uptraining config (configs/uptrain.py:PRESET).')
  flags.DEFINE_string('encoder', None, 'A Hugging Face BERT encoder folder.')
  flags.DEFINE_string('data', None, 'A folder with corpus/ and glue/.')
  flags.DEFINE_string('workdir', None, 'Where everything is written.')
  flags.DEFINE_string('summary', '', "A summary.json to merge 'uptrain' into (e.g. "
                      'docs/uptrain_cpu/summary.json).')
  flags.DEFINE_bool('report_only', False, 'Only rewrite the report, figure and summary '
                    'from the result files (nothing is trained; a run in progress is left '
                    'alone).')
  flags.DEFINE_bool('verbose', False, 'Show tracebacks of user errors.')


# ---------------------------------------------------------------------------------------
# The plan.

def validate(config) -> None:
  arms = list(config.arms)
  if not arms or any(a not in ARMS for a in arms) or len(set(arms)) != len(arms):
    raise UserError(f'config.arms must be distinct names from {", ".join(ARMS)}, got {arms}')
  curve = [float(m) for m in config.curve]
  if curve != sorted(set(curve)) or not curve or curve[0] != 0 or curve[-1] != config.minutes:
    raise UserError(f'config.curve must rise from 0 to config.minutes={config.minutes} '
                    f'without repeats, got {tuple(config.curve)}')
  missing = [m for m in config.glue_at if float(m) not in curve]
  if missing:
    raise UserError(f'config.glue_at: {missing} not on config.curve {tuple(config.curve)}')
  if config.steps_per_minute < 0 or config.workers < 1:
    raise UserError('config.steps_per_minute must be >= 0 and config.workers >= 1')
  if not config.steps_per_minute and not (
      0 < config.calibration_steps <= config.pretrain.warmup_steps):
    raise UserError(f'config.calibration_steps={config.calibration_steps} must be from 1 to '
                    f'pretrain.warmup_steps={config.pretrain.warmup_steps}: the warmup\'s '
                    'rates do not depend on the schedule\'s length, which calibration sets')


def minute_key(minutes) -> str:
  return f'{float(minutes):g}'


def init_dir(workdir: str, arm: str) -> str:
  return os.path.join(workdir, 'init', arm)


def arm_dir(workdir: str, arm: str) -> str:
  return os.path.join(workdir, 'arms', arm)


def snapshot_dir(workdir: str, arm: str, minutes) -> str:
  if float(minutes) == 0:
    return init_dir(workdir, arm)
  return os.path.join(arm_dir(workdir, arm), f'at_{minute_key(minutes)}')


def glue_dir(config, workdir: str, arm: str, minutes) -> str:
  # By task first: a rerun with another `glue.task` keeps the earlier task's results.
  return os.path.join(workdir, 'glue', config.glue.task, f'{arm}_{minute_key(minutes)}')


def prepare(config, encoder: str, data: str, workdir: str) -> None:
  """W/init/<arm> for every arm (step 1)."""
  original = init_dir(workdir, 'original')
  if not os.path.isfile(os.path.join(original, 'config.json')):
    convert_hf.import_hf(encoder, original)
  for arm in config.arms:
    target = init_dir(workdir, arm)
    if arm == 'original' or os.path.isfile(os.path.join(target, 'config.json')):
      continue
    t0 = time.time()
    weighted = arm == 'converted' and config.convert.fit_texts > 0
    text = convert_shared.convert_workdir(
        original, target, config.convert.attention,
        fit=config.convert.fit if arm == 'converted' else convert_shared.FRESH,
        fit_text=os.path.join(data, 'corpus') if weighted else None,
        fit_texts=int(config.convert.fit_texts), seed=int(config.convert.seed))
    jsonio.write_text(os.path.join(workdir, 'init', f'{arm}.txt'), text + '\n')
    logging.info('uptrain: %s prepared in %.0fs', arm, time.time() - t0)


def pretrain_config(config, data: str, workdir: str, arm: str, *, stop: int, schedule: int):
  """The arm's masked-LM config: the encoder's model, configs/uptrain.py's recipe."""
  cfg = sb_config.pretrain_config('standard', 'size=small')
  cfg.model = ml_collections.ConfigDict(
      convert_hf.read_workdir_config(init_dir(workdir, arm)).model.to_dict())
  p = config.pretrain
  cfg.data.corpus = os.path.join(data, 'corpus')
  cfg.data.seq_len, cfg.data.batch_size = int(p.seq_len), int(p.batch_size)
  cfg.data.eval_fraction = float(p.eval_fraction)
  cfg.optim.lr, cfg.optim.warmup_steps = float(p.lr), int(p.warmup_steps)
  cfg.optim.schedule_steps = int(schedule)
  cfg.total_steps = int(stop)
  cfg.log_every_steps = int(p.log_every_steps)
  cfg.eval_every_steps = cfg.ckpt.every_steps = 10 ** 9  # Only at the end of each chunk.
  cfg.eval_batches = int(p.eval_batches)
  cfg.ckpt.max_to_keep = 2
  cfg.fill_mask_examples = ()
  cfg.seed = 0
  return cfg


def train_seconds(run_dir: str, up_to: int) -> float:
  """Seconds of training steps up to step `up_to`, from metrics.jsonl (each log line's mean
  step time times the steps it covers)."""
  lines = jsonio.read_jsonl(os.path.join(run_dir, 'metrics.jsonl'))
  train = {l['step']: l['step_time'] for l in lines if l.get('step_time') is not None}
  total, previous = 0.0, 0
  for step in sorted(train):
    if step > up_to:
      break
    total += train[step] * (step - previous)
    previous = step
  return total


def _mean_step_time(run_dir: str) -> float:
  """The calibration's mean step time: its log lines after the first (which can carry the
  input pipeline's start)."""
  lines = [l for l in jsonio.read_jsonl(os.path.join(run_dir, 'metrics.jsonl'))
           if l.get('step_time') is not None]
  use = lines[1:] or lines
  return float(np.mean([l['step_time'] for l in use]))


# ---------------------------------------------------------------------------------------
# Jobs (each in a worker process).

def uptrain_arm(config, data: str, workdir: str, arm: str) -> dict:
  """Step 2 for one arm; returns its curve (resumes from what W/arms/<arm> holds)."""
  directory = arm_dir(workdir, arm)
  run = os.path.join(directory, 'train')
  if not os.path.isdir(run):  # A copy: W/init/<arm> stays the arm's minute-0 checkpoint.
    shutil.copytree(init_dir(workdir, arm), run + '.tmp', dirs_exist_ok=True)
    os.replace(run + '.tmp', run)
  plan_path = os.path.join(directory, 'plan.json')
  plan = jsonio.read_json(plan_path) if os.path.isfile(plan_path) else None
  if plan is None:
    spm = float(config.steps_per_minute)
    if not spm:
      train_lib.train_and_evaluate(pretrain_config(
          config, data, workdir, arm, stop=config.calibration_steps,
          schedule=CALIBRATION_PLACEHOLDER), run)
      spm = 60.0 / _mean_step_time(run)
    steps = {minute_key(m): int(round(float(m) * spm)) for m in config.curve}
    plan = {'steps_per_minute': spm, 'steps': steps,
            'schedule_steps': max(steps[minute_key(config.minutes)], 1),
            'calibrated': not config.steps_per_minute}
    jsonio.write_json(plan_path, plan)
  curve_path = os.path.join(directory, 'curve.json')
  curve = jsonio.read_json(curve_path) if os.path.isfile(curve_path) else {}
  for minutes in config.curve:
    key = minute_key(minutes)
    if key in curve:
      continue
    step = plan['steps'][key]
    point = {'step': step}
    if step > 0:
      train_lib.train_and_evaluate(pretrain_config(
          config, data, workdir, arm, stop=step, schedule=plan['schedule_steps']), run)
      # From metrics.jsonl, not the return value: a rerun killed after this chunk's save
      # finds nothing to train and evaluates nothing, but the chunk's evaluation is there.
      held_out = [l for l in jsonio.read_jsonl(os.path.join(run, 'metrics.jsonl'))
                  if l.get('step') == step and 'eval_loss' in l][-1]
      point.update({k: held_out.get(k) for k in ('eval_loss', 'eval_mlm_accuracy',
                                                 'eval_masked_tokens')})
    point['train_minutes'] = train_seconds(run, step) / 60 if step else 0.0
    folder = run if step else init_dir(workdir, arm)
    cfg, params, tok = convert_hf.read_encoder(folder)
    point['stsb_spearman'] = evaluators_lib.from_config(
        'sts', evaluators_lib.EncoderRun(PretrainedRun(folder, cfg, tok)),
        glue_dir=os.path.join(data, 'glue'), max_examples=int(config.stsb_pairs),
        seq_len=int(config.stsb_seq_len)).run({'bert': params})['spearman']
    if float(minutes) in [float(m) for m in config.glue_at] and step > 0:
      _keep_checkpoint(run, step, snapshot_dir(workdir, arm, minutes))
    curve[key] = point
    jsonio.write_json(curve_path, curve)
    logging.info('uptrain: %s at %s min (step %d, %.1f training minutes): STS-B %.4f, '
                 'held-out loss %s', arm, key, step, point['train_minutes'],
                 point['stsb_spearman'], point.get('eval_loss'))
  return curve


def _keep_checkpoint(run: str, step: int, target: str) -> None:
  """TARGET: a workdir holding RUN's config, vocabulary and its checkpoint at `step`."""
  if os.path.isdir(target):
    return
  tmp = target + '.tmp'
  shutil.rmtree(tmp, ignore_errors=True)
  os.makedirs(os.path.join(tmp, checkpoint_lib.CHECKPOINT_DIR))
  shutil.copy(os.path.join(run, 'config.json'), tmp)
  tokenizer_lib.copy_vocab(run, tmp)
  shutil.copytree(os.path.join(checkpoint_lib.checkpoint_dir(run), str(step)),
                  os.path.join(checkpoint_lib.checkpoint_dir(tmp), str(step)))
  os.replace(tmp, target)


def glue_config(config, data: str, init_from: str):
  g = config.glue
  cfg = load_config_file(os.path.join(REPO_CONFIGS, 'glue.py'), f'task={g.task},seeds={g.seeds}')
  cfg.init_from = init_from
  cfg.data.glue_dir = os.path.join(data, 'glue')
  cfg.data.seq_len = int(g.seq_len)
  cfg.data.max_train_examples = int(g.max_train_examples)
  cfg.num_epochs, cfg.batch_size = int(g.num_epochs), int(g.batch_size)
  cfg.optim.lr = float(g.lr)
  cfg.eval.predict_test = False
  cfg.ckpt.max_to_keep = 0
  return cfg


def finetune_snapshot(config, data: str, workdir: str, arm: str, minutes) -> dict:
  """Step 3 for one kept checkpoint (resumes per seed, as sharedbert.main does)."""
  out = glue_dir(config, workdir, arm, minutes)
  finetune.finetune_and_evaluate(glue_config(config, data, snapshot_dir(workdir, arm, minutes)),
                                 out)
  return glue_scores(config, out)


def glue_scores(config, out: str) -> dict:
  """Per seed: the dev score, predictions and labels of a finished fine-tuning run."""
  task = config.glue.task
  results = jsonio.read_json(os.path.join(out, 'results.json'))
  seeds = []
  for record in results['tasks'][task]['per_seed']:
    split = next(iter(record['dev']))
    table = np.genfromtxt(os.path.join(out, task, f'seed_{record["seed"]}',
                                       record['dev'][split].get('predictions_file',
                                                                'dev_predictions.tsv')),
                          delimiter='\t', names=True)
    seeds.append({'seed': record['seed'], 'score': record['dev'][split]['score'],
                  'predictions': table['prediction'].tolist(), 'labels': table['label'].tolist()})
  return {'task': task, 'seeds': seeds}


# ---------------------------------------------------------------------------------------
# Running the jobs.

def jobs_of(config, workdir: str) -> list[tuple]:
  """('arm', arm) first (longest), then ('glue', arm, minutes) by minute."""
  jobs = [('arm', arm) for arm in config.arms]
  for minutes in sorted(float(m) for m in config.glue_at):
    jobs += [('glue', arm, minutes) for arm in config.arms]
  return jobs


def job_done(config, workdir: str, job) -> bool:
  if job[0] == 'arm':
    path = os.path.join(arm_dir(workdir, job[1]), 'curve.json')
    return os.path.isfile(path) and all(
        minute_key(m) in jsonio.read_json(path) for m in config.curve)
  return os.path.isfile(os.path.join(glue_dir(config, workdir, job[1], job[2]), 'results.json'))


def job_ready(workdir: str, job, done: set) -> bool:
  """A fine-tuning job waits for its checkpoint; minute 0 is there from the start."""
  if job[0] == 'arm' or job[2] == 0:
    return True
  return ('arm', job[1]) in done


def describe(job) -> str:
  return (f'uptraining {job[1]}' if job[0] == 'arm'
          else f'fine-tuning {job[1]} at {minute_key(job[2])} min')


def run_jobs(config, data: str, workdir: str) -> None:
  todo = [j for j in jobs_of(config, workdir) if not job_done(config, workdir, j)]
  done = {j for j in jobs_of(config, workdir) if j not in todo}
  if not todo:
    return
  t0, count = time.time(), len(todo)
  logging.info('uptrain: %d jobs to do, %d at a time', count, config.workers)
  started, took = {}, {'arm': [], 'glue': []}  # Start times; seconds per job, by kind.

  def args_of(job):
    logging.info('uptrain: start %s', describe(job))
    started[job] = time.time()
    if job[0] == 'arm':
      return (uptrain_arm, config, data, workdir, job[1])
    return (finetune_snapshot, config, data, workdir, job[1], job[2])

  def finished(job, _):
    done.add(job)
    took[job[0]].append(time.time() - started.pop(job, t0))
    left = [j for j in todo if j not in done]
    elapsed = time.time() - t0
    # ETA: the jobs left at the mean time of their kind so far (an arm: its training
    # minutes and a quarter more for evaluations, until one has finished), `workers` at once.
    mean = {k: (np.mean(v) if v else (60 * 1.25 * config.minutes if k == 'arm' else None))
            for k, v in took.items()}
    known = [mean[j[0]] for j in left if mean[j[0]] is not None]
    eta = (f'; about {reporting.duration(sum(known) / config.workers)} left'
           if known and len(known) == len(left) else '')
    logging.info('uptrain: %s done (%d/%d) after %s%s', describe(job), count - len(left), count,
                 reporting.duration(elapsed), eta)

  workers_lib.run_when_ready(todo, _call, args_of, workers=int(config.workers),
                             on_done=finished, ready=lambda j: job_ready(workdir, j, done),
                             describe=describe)


def _call(fn, *args):
  return fn(*args)


# ---------------------------------------------------------------------------------------
# Results.

def analyse(config, workdir: str) -> dict:
  """{arm: {minutes: point (+ 'glue')}, 'kept': ...} from the finished jobs' files."""
  out = {}
  distributions = {}
  spec = glue_data.get_task(config.glue.task)
  score_fn = glue_metrics.task_score_fn(spec)
  for arm in config.arms:
    path = os.path.join(arm_dir(workdir, arm), 'curve.json')
    curve = jsonio.read_json(path) if os.path.isfile(path) else {}
    plan_path = os.path.join(arm_dir(workdir, arm), 'plan.json')
    out[arm] = {key: dict(point) for key, point in curve.items()}
    if os.path.isfile(plan_path):
      out[arm]['plan'] = jsonio.read_json(plan_path)
    for minutes in config.glue_at:
      key = minute_key(minutes)
      results = os.path.join(glue_dir(config, workdir, arm, minutes), 'results.json')
      if not os.path.isfile(results):
        continue
      scores = glue_scores(config, glue_dir(config, workdir, arm, minutes))
      dev = next(iter(jsonio.read_json(results)['tasks'][spec.name]['dev'].values()))
      out['majority'] = {spec.name: 100 * dev['majority_baseline']}
      per_seed = [100 * s['score'] for s in scores['seeds']]
      dtype = np.float32 if spec.is_regression else np.int64
      labels = np.asarray(scores['seeds'][0]['labels'], dtype)
      # The same example resamples for every arm and minute: paired ratios below.
      dist = 100 * stats.bootstrap_seed_mean(
          score_fn, [np.asarray(s['predictions'], dtype) for s in scores['seeds']], labels,
          num_resamples=int(config.bootstrap_resamples), seed=zlib.crc32(spec.name.encode()))
      distributions[arm, key] = (dist, per_seed)
      low, high = stats.percentile_interval(dist, config.confidence)
      mean, std = stats.mean_std(per_seed)
      out[arm].setdefault(key, {})['glue'] = {
          spec.name: {'mean': mean, 'std': std, 'ci_low': low, 'ci_high': high,
                      'seeds': len(per_seed), 'per_seed': per_seed}}
  out['kept'] = _kept(config, distributions)
  return out


def _kept(config, distributions: dict) -> dict:
  """Each arm's GLUE score as a fraction of the original's at minute 0, with the interval
  of the paired bootstrap ratio (dev examples resampled; the seed spread is the std)."""
  base = distributions.get(('original', '0'))
  if base is None:
    return {}
  kept = {}
  for (arm, key), (dist, per_seed) in distributions.items():
    ratio = dist / np.maximum(base[0], 1e-9)
    low, high = stats.percentile_interval(ratio, config.confidence)
    kept.setdefault(key, {})[arm] = {'fraction': float(np.mean(per_seed) / np.mean(base[1])),
                                     'ci_low': low, 'ci_high': high}
  return kept


def plot(config, results: dict, path: str) -> bool:
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
  drawn = False
  for arm in config.arms:
    points = [(v['train_minutes'], v) for k, v in results.get(arm, {}).items()
              if k not in ('plan',) and 'stsb_spearman' in v]
    points.sort(key=lambda p: p[0])
    if not points:
      continue
    drawn = True
    left.plot([m for m, _ in points], [v['stsb_spearman'] for _, v in points], 'o-', label=arm)
    losses = [(m, v['eval_loss']) for m, v in points if v.get('eval_loss') is not None]
    right.plot([m for m, _ in losses], [l for _, l in losses], 'o-', label=arm)
  left.set(xlabel='training minutes', ylabel='zero-shot STS-B dev Spearman',
           title='Sentence similarity without fine-tuning')
  right.set(xlabel='training minutes', ylabel='held-out MLM loss (nats)',
            title='Masked-LM loss on held-out text')
  for ax in (left, right):
    ax.grid(alpha=0.3)
    ax.legend()
  fig.tight_layout()
  if drawn:
    fig.savefig(path, dpi=110)
  plt.close(fig)
  return drawn


def headline(config, results: dict) -> list[str]:
  """One sentence per minute of `glue_at` that has the converted arm's fine-tuning: what it
  keeps of the original's minute-0 score, beside the other arms."""
  task = task_title(config.glue.task)
  lines = []
  for m in config.glue_at:
    kept = results.get('kept', {}).get(minute_key(m), {})
    if 'converted' not in kept:
      continue
    parts = [f'`{arm}` {k["fraction"]:.3f} [{k["ci_low"]:.3f}, {k["ci_high"]:.3f}]'
             for arm, k in kept.items()]
    lines.append(f'- After {minute_key(m)} minutes: share of the original encoder\'s '
                 f'{task} score kept: ' + ', '.join(parts) + '.')
  return lines or ['No arm has been fine-tuned yet.']


def report(config, encoder: str, data: str, results: dict, wall_s: float | None) -> str:
  """report.md's text; `wall_s` None: a --report_only rewrite."""
  task = config.glue.task
  lines = [f'# Uptraining `{paths.display(encoder)}` into shared attention', '',
           'Each arm continues masked-LM training on '
           f'`{paths.display(os.path.join(data, "corpus"))}` for {config.minutes:g} training '
           'minutes on one core (warmup '
           f'{config.pretrain.warmup_steps} steps, then linear decay to 0; batch '
           f'{config.pretrain.batch_size} x {config.pretrain.seq_len} tokens, lr '
           f'{config.pretrain.lr:g}):', '']
  lines += [f'- `{arm}`: {ARMS[arm]}' for arm in config.arms]
  lines += ['', f'## How much of the original\'s {task_title(task)} score each arm keeps', '',
            f'{task_title(task)} dev score (points) fine-tuned from each arm\'s checkpoint, mean ± '
            f'std over {config.glue.seeds} fine-tuning seeds, [{config.confidence:.0%} '
            'interval of the seed mean over dev examples], and the fraction of the original '
            'encoder\'s score (minute 0) it keeps, with the interval of the paired ratio.', '']
  header = ['arm'] + [f'{minute_key(m)} min' for m in config.glue_at]
  rows = []
  for arm in config.arms:
    row = [f'`{arm}`']
    for m in config.glue_at:
      g = results.get(arm, {}).get(minute_key(m), {}).get('glue', {}).get(task)
      k = results.get('kept', {}).get(minute_key(m), {}).get(arm)
      if g is None:
        row.append('not run yet')
        continue
      cell = f'{g["mean"]:.2f} ± {g["std"]:.2f} [{g["ci_low"]:.1f}, {g["ci_high"]:.1f}]'
      if k is not None:
        cell += f'; keeps {k["fraction"]:.3f} [{k["ci_low"]:.3f}, {k["ci_high"]:.3f}]'
      row.append(cell)
    rows.append(row)
  lines += reporting.md_table(header, rows)
  majority = results.get('majority', {}).get(task)
  if majority is not None:
    lines += ['', f'Always predicting the majority training label scores {majority:.2f}: a '
              'score near it means fine-tuning learned little beyond the label prior.']
  lines += ['', *headline(config, results)]
  lines += ['', '## Recovery curve', '',
            'At each point: the training minutes actually spent (the step was fixed from the '
            'arm\'s calibrated speed), held-out MLM loss on the eval split (never fitted on) '
            'and zero-shot STS-B dev Spearman (cosine of mean-pooled final hidden states). At '
            'minute 0 the MLM head is untrained (a sentence encoder ships without one), so no '
            'loss is given there.', '']
  rows = []
  for m in config.curve:
    row = [minute_key(m)]
    for arm in config.arms:
      p = results.get(arm, {}).get(minute_key(m))
      if p is None or 'stsb_spearman' not in p:
        row.append('–')
        continue
      loss = f'{p["eval_loss"]:.3f}' if p.get('eval_loss') is not None else '–'
      row.append(f'step {p["step"]}, {p["train_minutes"]:.1f} min: STS-B '
                 f'{p["stsb_spearman"]:.4f}, loss {loss}')
    rows.append(row)
  lines += reporting.md_table(['minutes'] + [f'`{a}`' for a in config.arms], rows)
  speeds = [f'`{arm}` {results[arm]["plan"]["steps_per_minute"]:.1f}'
            for arm in config.arms if 'plan' in results.get(arm, {})]
  if speeds:
    lines += ['', 'Steps per training minute ('
              + ('measured per arm' if any(results[a].get('plan', {}).get('calibrated')
                                           for a in config.arms if a in results)
                 else 'fixed by the config') + '): ' + ', '.join(speeds) + '.']
  lines += ['', '![recovery](recovery.png)', '',
            ('Rewritten from the run\'s files (--report_only), which hold no wall time of '
             'the run' if wall_s is None else
             f'Wall time of this invocation {reporting.duration(wall_s)}')
            + f'; load average at the end {os.getloadavg()[0]:.2f}.', '']
  return '\n'.join(lines)


def run(config, encoder: str, data: str, workdir: str, summary_path: str = '', *,
        report_only: bool = False) -> str:
  validate(config)
  for path, what in ((encoder, '--encoder'), (os.path.join(data, 'corpus'), '--data'),
                     (os.path.join(data, 'glue', 'STS-B'), '--data')):
    if not os.path.isdir(path):
      raise UserError(f'{what}: {path} is not a folder')
  if not report_only:  # A folder that is no BERT is refused before W/ is created.
    convert_hf.check_hf_dir(encoder)
  t0 = time.time()
  if report_only:
    if not os.path.isdir(os.path.join(workdir, 'arms')):
      raise UserError(f'--report_only: {workdir} holds no uptraining run')
  else:
    os.makedirs(workdir, exist_ok=True)
    if config.conversion:
      conversion.run(encoder, data, os.path.join(workdir, 'conversion'))
    prepare(config, encoder, data, workdir)
    run_jobs(config, data, workdir)
  results = analyse(config, workdir)
  converted = os.path.join(workdir, 'conversion', 'summary.json')
  for path in filter(None, [os.path.join(workdir, 'summary.json'), summary_path]):
    summary = jsonio.read_json(path) if os.path.isfile(path) else {}
    summary['uptrain'] = results
    if os.path.isfile(converted):
      summary['conversion'] = jsonio.read_json(converted)['conversion']
    jsonio.write_json(path, summary)
  plot(config, results, os.path.join(workdir, 'recovery.png'))
  jsonio.write_text(os.path.join(workdir, 'report.md'),
                    report(config, encoder, data, results,
                           None if report_only else time.time() - t0))
  return os.path.join(workdir, 'report.md')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  with one_line_errors('sharedbert uptrain', FLAGS.verbose, trains=True):
    if not (FLAGS.encoder and FLAGS.data and FLAGS.workdir):
      raise UserError('--encoder, --data and --workdir are required')
    print(run(FLAGS.config, FLAGS.encoder, FLAGS.data, FLAGS.workdir, FLAGS.summary,
              report_only=FLAGS.report_only))


if __name__ == '__main__':
  _define_flags()
  from sharedbert import cli
  app.run(main, flags_parser=cli.flags_parser('sharedbert uptrain',
                                              'sharedbert.lab.uptrain'))
