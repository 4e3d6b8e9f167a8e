"""W/report.md and its figures, from the result files of a study (sharedbert.lab.study).

Conventions (also written into the report):
  * Scores are GLUE task scores (MRPC (F1+acc)/2, STS-B (Pearson+Spearman)/2, CoLA MCC,
    else accuracy), shown x100.
  * mean ± std: over fine-tuning seeds (sample std); when GLUE fine-tunes several
    pretraining seeds (glue.pretrain_seeds), over those, each the mean of its fine-tuning
    seeds, and the interval is hierarchical (stats.bootstrap_hierarchical_mean).
  * 95% CI of a mean: percentile bootstrap over dev examples of the seed mean (every seed
    scored on the same resample; sharedbert.metrics.stats.bootstrap_seed_mean). It measures
    how much the figure depends on which dev examples were drawn.
  * Paired difference against `standard`: the same dev resamples score both variants, so
    the difference's interval is much tighter than two separate intervals; a second
    interval, over seeds (seed s of a variant paired with seed s of standard: the same
    fine-tuning data order), is a t interval of the per-seed differences. A difference is
    called reliable only when both intervals exclude 0.
  * The average over tasks uses the tasks this study ran (GLUE's convention of nine tasks
    cannot be met on the local data) except WNLI, which GLUE's average leaves out (its dev
    set is adversarial; most systems score at or below the majority); its interval
    averages the tasks' bootstrap draws (each task's dev set resampled independently).
  * Verdict of a variant against `standard` (`verdict`), per task and on the average:
    "better" / "worse" when both intervals above lie above / below 0; else "equivalent
    within +-delta" (delta = config.equivalence_margin points) when a two one-sided test
    at level 1 - confidence on each side passes for both kinds of interval, i.e. both
    (2 * confidence - 1) intervals (90% for 95%) lie strictly inside (-delta, +delta);
    else "undecided".
  * What pretraining buys: `standard` against the majority class (scored on the same dev
    resamples; the same constant for every seed) and against the `none` baseline (the
    same architecture fine-tuned from random weights); "reliably better" means both
    intervals lie above 0.
  * Paths are never absolute (sharedbert.utils.paths): relative to the repository, or W/... for
    the study's workdir.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from sharedbert.utils import jsonio
from sharedbert.utils import reporting
from sharedbert.data import glue
from sharedbert.metrics import stats
from sharedbert.lab.study_plots import (plot_glue, plot_pretraining, plot_robustness,
                                               plot_time)
from sharedbert.lab.study_stats import (AVERAGE_EXCLUDES, Analysis, analyse, gains_sentence,
                                    headline, reliably_better, task_title, tost_confidence,
                                    verdict_text)
from sharedbert.evaluators import crossdomain
from sharedbert.lab import study_linear
from sharedbert.lab import study_plan
from sharedbert.lab import study_pretrain
from sharedbert.lab import study_pretrain_report
from sharedbert.utils import paths


_pct = reporting.pct


def _fmt_ci(ci) -> str:
  return '–' if np.isnan(ci[0]) else f'[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]'


def _fmt_diff(d: dict) -> str:
  mark = ' **reliable**' if d['reliable'] else ''
  return f'{100 * d["diff"]:+.1f} {_fmt_ci(d["boot_ci"])} / {_fmt_ci(d["t_ci"])}{mark}'


def _row_name(v: str, baselines) -> str:
  return f'{v} (no pretraining)' if v in baselines else v


def _parameters_section(a: Analysis) -> list[str]:
  """Parameter counts per variant."""
  variants, base, counts = a.variants, a.base, a.counts
  lines = ['## Parameters', '',
           'Counted from the real parameter tree (sharedbert.models.params); "encoder" is what '
           'BERT counts (embeddings, layers, pooler), without the MLM head.', '',
           '| variant | attention QKV | encoder | encoder vs standard |', '|---|---|---|---|']
  for v in variants:
    c = counts[v]
    ref = counts.get(base, c)['encoder total']
    lines.append(f'| {v} | {c["attention QKV"]:,} | {c["encoder total"]:,} | '
                 f'{100 * (c["encoder total"] - ref) / ref:+.2f}% |')
  lines.append('')
  return lines


def _glue_section(a: Analysis) -> list[str]:
  """The GLUE table: every row, the majority class, the average."""
  (conf, baselines, rows, runs, table, cols, has_avg, keys, avg_tasks, majority) = (
      a.conf, a.baselines, a.rows, a.runs, a.table, a.cols, a.has_avg, a.keys, a.avg_tasks,
      a.majority)
  hierarchical = max((e.get('pretrain_seeds', 1) for v in rows for t, e in table[v].items()
                      if t != '_average'), default=1) > 1
  if hierarchical:
    pretrain_seeds = max(e.get('pretrain_seeds', 1) for v in rows for e in table[v].values())
    legend = (f'Score ×100: each pretrained variant fine-tuned from {pretrain_seeds} '
              'pretraining seeds (phase B, at its chosen rate), each with the same fine-tuning '
              'seeds; mean ± std over pretraining seeds (of their mean over fine-tuning seeds), '
              f'then the {conf:.0%} hierarchical bootstrap interval (pretraining seeds, then '
              'fine-tuning seeds within each, then dev examples, all resampled). A baseline has '
              'no pretraining seed: mean ± std over fine-tuning seeds and the interval over dev '
              'examples. Differences between variants pair by pretraining seed; a baseline\'s '
              't interval pairs the k-th pretraining seed with its k-th fine-tuning seed, which '
              'is valid for independent runs but not paired. ')
  else:
    legend = (f'Score ×100: mean ± std over fine-tuning seeds, then the {conf:.0%} bootstrap '
              'interval of the seed mean over dev examples. ')
  lines = ['## GLUE dev scores', '',
           legend + 'Majority: always predicting the most frequent training label (STS-B: '
           'the mean).', '']
  head = ['variant'] + [task_title(t) for t in cols] + (['average'] if has_avg else [])
  lines += reporting.md_table(head)
  for v in rows:
    cells = [_row_name(v, baselines)]
    for t in keys:
      e = table[v].get(t)
      cells.append('–' if e is None else
                   f'{_pct(e["mean"])} ± {_pct(e["std"])} [{_pct(e["ci"][0])}, {_pct(e["ci"][1])}]')
    lines.append(reporting.md_row(cells))
  if cols:
    maj = ['majority'] + [_pct(next(table[v][t]['majority'] for v in rows if t in table[v]))
                          for t in cols]
    if has_avg:
      maj.append(_pct(majority['_average']['mean']) if majority.get('_average') else '')
    lines.append(reporting.md_row(maj))
  if has_avg:
    lines += ['', f'Average: the unweighted mean of the task scores over '
              f'{", ".join(task_title(t) for t in avg_tasks)} (not the nine-task GLUE score)'
              + ('; WNLI is left out, as GLUE\'s average leaves it out (its dev set is '
                 'adversarial: most systems score at or below the majority)'
                 if 'wnli' in cols else '') + '.']
  by_count = {}  # Models per cell -> the rows that have it.
  for v in rows:
    for count in sorted({len(rs) for rs in runs[v].values()}):
      by_count.setdefault(count, []).append(v)
  per_cell = '; '.join(f'{n} ({", ".join(vs)})' for n, vs in sorted(by_count.items()))
  lines += ['', f'Fine-tuned models per cell: {per_cell or "none"}.', '']
  return lines


def _differences_section(a: Analysis) -> list[str]:
  """Paired differences and verdicts against the base variant, then what pretraining buys."""
  (variants, conf, margin, baselines, table, base, cols, has_avg, keys, diffs, verdicts,
   gains, majority) = (
      a.variants, a.conf, a.margin, a.baselines, a.table, a.base, a.cols, a.has_avg, a.keys,
      a.diffs, a.verdicts, a.gains, a.majority)
  lines = []
  if len(variants) > 1:
    lines += [f'### Paired differences against `{base}`', '',
              f'×100, variant minus {base}: the point estimate, the {conf:.0%} paired '
              'bootstrap interval over dev examples / the t interval over seed-paired '
              'differences. **reliable**: both intervals exclude 0.', '']
    head = ['variant'] + [task_title(t) for t in cols] + (['average'] if has_avg else [])
    lines += reporting.md_table(head)
    for v, dd in diffs.items():
      cells = [v] + [_fmt_diff(dd[t]) if t in dd else '–' for t in keys]
      lines.append(reporting.md_row(cells))
    lines.append('')
    lines += _verdict_section(diffs, verdicts, base, keys, margin, conf)
  lines += _gains_section(gains, table, majority, base, baselines, keys, conf)
  return lines


def reference_runs_sentence(pretrain: dict, variants) -> str:
  """Which runs the bottom pretraining table shows: the reference runs, as configured."""
  parts = []
  for v in variants:
    p = pretrain.get(v) or {}
    if 'lr' in p:
      init = f', {p["init"]} diagonals' if v == 'shared' and p.get('init') else ''
      parts.append(f'{v} seed {p.get("seed")} at lr {p["lr"]:g}{init}')
  return ('The reference runs (W/pretrain/<variant>, the study\'s recipe as configured: '
          + ('; '.join(parts) if parts else 'none finished')
          + '), not the verdict\'s runs at each variant\'s chosen rate (above).')


def _pretraining_section(a: Analysis) -> list[str]:
  """Pretraining figures per variant, and the GLUE figure."""
  (workdir, variants, rows, table, pretrain, base, cols, tasks) = (
      a.workdir, a.variants, a.rows, a.table, a.pretrain, a.base, a.cols, a.tasks)
  lines = ['## Pretraining', '', reference_runs_sentence(pretrain, variants) + ' Every '
           'variant: the same vocabulary, data order, masks, steps and seed. Held-out '
           'figures are on the held-out documents of the corpus at the last step.', '',
           '| variant | steps | final train loss | held-out MLM loss | held-out MLM accuracy '
           '| majority accuracy | median step time (ms) | vs standard |',
           '|---|---|---|---|---|---|---|---|']
  ref_t = pretrain.get(base, {}).get('step_time_median')
  for v in variants:
    p = pretrain.get(v)
    if not p:
      lines.append(f'| {v} | not finished | | | | | | |')
      continue
    st = p.get('step_time_median')
    rel = f'{100 * (st - ref_t) / ref_t:+.1f}%' if st and ref_t else '–'
    lines.append(f'| {v} | {p.get("steps")} | {p.get("train_loss", float("nan")):.3f} | '
                 f'{p.get("eval_loss", float("nan")):.3f} | '
                 f'{_pct(p.get("eval_mlm_accuracy"))} | {_pct(p.get("eval_majority_accuracy"))} | '
                 f'{1000 * st:.1f} | {rel} |' if st else f'| {v} | {p.get("steps")} | | | | | | |')
  weak = [v for v, p in pretrain.items()
          if p.get('eval_mlm_accuracy') is not None and p.get('eval_majority_accuracy') is not None
          and p['eval_mlm_accuracy'] <= p['eval_majority_accuracy'] + 0.005]
  if weak:
    lines += ['', f'**Caution:** the held-out MLM accuracy of {", ".join(weak)} does not beat '
              'always predicting the most frequent masked token: these encoders learned little '
              'beyond token frequencies, so the fine-tuning results below compare nearly '
              'untrained attention layers, not the variants\' pretrained quality. Pretrain '
              'longer (pretrain.override.total_steps) for a comparison of substance.']
  if plot_pretraining(workdir, variants, os.path.join(workdir, 'pretraining.png')):
    lines += ['', '![pretraining and held-out MLM loss](pretraining.png)']
  lines.append('')
  if cols:
    plot_glue(table, rows, tasks, os.path.join(workdir, 'glue.png'))
    lines += ['![GLUE dev scores with 95% intervals](glue.png)', '']
  return lines


def _robustness_section(a: Analysis) -> list[str]:
  """Scores under embedding noise."""
  workdir, rows, rob = a.workdir, a.rows, a.rob
  lines = ['## Robustness to embedding noise', '']
  if rob:
    r0 = next(iter(next(iter(rob.values())).values()))
    lines += [
        'Gaussian noise added to the input embeddings (the output of the embedding '
        'LayerNorm) of the fine-tuned models on the dev sets. Level = noise std as a fraction '
        'of the std of the embedding output over each sequence\'s non-pad tokens '
        '(sharedbert.evaluators.robustness). '
        f'{r0["noise_seeds"]} noise seeds per level; per fine-tuning seed the mean over '
        'noise seeds, then mean ± std over fine-tuning seeds. Level 0 is the clean score. '
        'Drop: score at the highest level minus the clean score.', '']
    for t, per_v in rob.items():
      levels = next(iter(per_v.values()))['levels']
      head = ['variant'] + [f'{100 * l:g}%' for l in levels] + ['drop']
      lines += [f'**{task_title(t)}**', '', '| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
      for v in rows:
        e = per_v.get(v)
        if e is None:
          continue
        cells = [v] + [f'{_pct(m)} ± {_pct(s)}' for m, s in zip(e['mean'], e['std'])]
        cells.append(f'{100 * (e["mean"][-1] - e["mean"][0]):+.1f}')
        lines.append(reporting.md_row(cells))
      lines.append('')
    plot_robustness(rob, rows, os.path.join(workdir, 'robustness.png'))
    lines += ['![robustness curves](robustness.png)', '']
  else:
    lines += ['No robustness results yet.', '']
  return lines


def _crossdomain_section(a: Analysis) -> list[str]:
  """Cross-domain transfer scores."""
  config, rows, runs = a.config, a.rows, a.runs
  lines = ['## Cross-domain transfer', '']
  pairs = list(config.crossdomain.pairs)
  cross = {}
  for v in rows:
    for t, rs in runs[v].items():
      for r in rs:
        for name, e in r.get('crossdomain', {}).items():
          cross.setdefault(name, {}).setdefault(v, []).append(e)
  if cross:
    names = [p for p in pairs if p in cross] + [p for p in cross if p not in pairs]
    lines += ['A model fine-tuned on the source task, scored on the target\'s evaluation set '
              'after mapping labels as listed. Score ×100 (mean of the listed metrics), '
              'mean ± std over fine-tuning seeds.', '',
              '| variant | ' + ' | '.join(names) + ' |', '|---|' + '---|' * len(names)]
    for v in rows:
      cells = [v]
      for n in names:
        es = cross[n].get(v)
        if not es:
          cells.append('–')
          continue
        m, s = stats.mean_std([e['score'] for e in es])
        cells.append(f'{_pct(m)} ± {_pct(s)}')
      lines.append(reporting.md_row(cells))
    any_e = {n: next(iter(cross[n].values()))[0] for n in names}
    lines.append('| majority | ' + ' | '.join(_pct(any_e[n]['majority_score']) for n in names) + ' |')
    lines += ['', '| pair | label mapping | metrics | n | gold positive rate |',
              '|---|---|---|---|---|']
    for n in names:
      e = any_e[n]
      lines.append(f'| {n} | {e["mapping"]} | {", ".join(e["metrics"])} | {e["n"]} | '
                   f'{_pct(e["positive_rate"])}% |')
    lines.append('')
  else:
    lines += ['No cross-domain results.', '']
  return lines


def _time_section(a: Analysis) -> list[str]:
  """Wall-clock per pretraining step and per fine-tuning epoch."""
  workdir, rows, pretrain, epoch_s, tasks = a.workdir, a.rows, a.pretrain, a.epoch_s, a.tasks
  lines = ['## Training time', '',
           'Wall-clock measured in this study, on the same machine, one run at a time. '
           'Pretraining: median seconds per optimizer step over the logged intervals '
           '(compilation excluded). Fine-tuning: seconds per epoch including the dev '
           'evaluation, from epochs after the first (which includes compilation), mean over '
           'seeds. On a shared machine these carry noise from other load.', '']
  tasks_t = [t for t in tasks if any(t in epoch_s.get(v, {}) for v in rows)]
  head = ['variant', 'pretraining ms/step'] + [f'{task_title(t)} s/epoch' for t in tasks_t]
  lines += reporting.md_table(head)
  for v in rows:
    st = pretrain.get(v, {}).get('step_time_median')
    cells = [v, f'{1000 * st:.1f}' if st else '–']
    cells += [f'{epoch_s[v][t]:.1f}' if t in epoch_s.get(v, {}) else '–' for t in tasks_t]
    lines.append(reporting.md_row(cells))
  lines.append('')
  if pretrain or epoch_s:
    plot_time(pretrain, epoch_s, rows, os.path.join(workdir, 'time.png'))
    lines += ['![training time](time.png)', '']
  return lines


def _completeness_section(a: Analysis) -> list[str]:
  """What is missing."""
  missing = a.missing
  lines = ['## Completeness', '']
  lines += ([f'- missing: {m}' for m in missing] if missing else
            ['Every planned pretraining and fine-tuning run finished.'])
  lines.append('')
  return lines


def _summary(a: Analysis) -> dict:
  """W/summary.json: the report's figures for programs."""
  (config, workdir, variants, conf, margin, baselines, rows, table, pretrain, base,
   avg_tasks, diffs, verdicts, counts, rob, epoch_s, missing, tasks, skipped, skipped_pairs,
   gains, majority) = (
      a.config, a.workdir, a.variants, a.conf, a.margin, a.baselines, a.rows, a.table,
      a.pretrain, a.base, a.avg_tasks, a.diffs, a.verdicts, a.counts, a.rob, a.epoch_s,
      a.missing, a.tasks, a.skipped, a.skipped_pairs, a.gains, a.majority)
  diff_keys = ('diff', 'boot_ci', 't_ci', 'per_seed', 'reliable', 'boot_ci_tost', 't_ci_tost')
  return {
      'variants': variants, 'baselines': baselines, 'tasks': tasks,
      'skipped_tasks': {t: why for t, why in skipped},
      'skipped_crossdomain_pairs': {n: why for n, why in skipped_pairs},
      'data': _data_paths(config, workdir, variants),
      'glue': {v: {t: {k: e[k] for k in ('mean', 'std', 'ci', 'per_seed', 'seeds',
                                         'pretrain_seeds', 'finetune_seeds') if k in e}
                   for t, e in table[v].items()} for v in rows},
      'glue_intervals': ('hierarchical: pretraining seed, fine-tuning seed, dev examples'
                         if study_plan.glue_pretrain_seeds(config) > 1
                         else 'dev examples (the fine-tuning seeds kept; their spread is std)'),
      'majority': {t: e['mean'] for t, e in majority.items() if e},
      'paired_differences': {v: {t: {k: d[k] for k in diff_keys} for t, d in dd.items()}
                             for v, dd in diffs.items()},
      'equivalence_margin_points': float(config.equivalence_margin),
      'tost_confidence': tost_confidence(conf),
      'verdicts': verdicts,
      'pretraining_gains': {t: {k: {**{x: d[x] for x in diff_keys},
                                    'reliably_better': reliably_better(d)}
                                for k, d in e.items()} for t, e in gains.items()},
      'headline': ' '.join(headline(verdicts, gains, base, baselines, margin, avg_tasks)).strip(),
      'pretraining': pretrain, 'parameters': counts, 'fine_tuning_epoch_s': epoch_s,
      'robustness': {t: {v: {k: np.asarray(x).tolist() for k, x in e.items()}
                         for v, e in per_v.items()} for t, per_v in rob.items()},
      'missing': missing,
  }


def build_report(config, workdir: str, variants) -> tuple[str, dict]:
  """The report's markdown and a summary dict (also written as W/summary.json)."""
  a = analyse(config, workdir, variants)
  arms = study_pretrain.analyse(config, workdir, variants)
  lines = [f'# Controlled study of attention variants (preset `{config.preset}`)', '']
  lines += study_pretrain_report.sections(arms, workdir)
  linear = study_linear.analyse(config, workdir, variants, a.tasks)
  lines += study_linear.section(linear)
  lines += [('## GLUE (fine-tuning every phase-B pretraining seed)'
             if int(config.glue.get('pretrain_seeds', 0)) else
             '## GLUE (fine-tuning the reference runs)'), '']
  lines += headline(a.verdicts, a.gains, a.base, a.baselines, a.margin, a.avg_tasks)
  lines += _glue_informative(a)
  lines += _header(config, workdir, variants, a.baselines, a.tasks, a.skipped, a.skipped_pairs)
  for section in (_parameters_section, _glue_section, _differences_section,
                  _pretraining_section, _robustness_section, _crossdomain_section,
                  _time_section):
    lines += section(a)
  lines += ['## SQuAD', ''] + _squad_section(config, workdir, variants)
  lines += _completeness_section(a)
  summary = _summary(a)
  summary['pretraining'] = {**arms['pretraining'], 'reference': summary['pretraining']}
  summary['scaling'] = arms['scaling']
  summary['linear_probes'] = linear
  avg = a.gains.get('_average', {}) if a.gains else {}
  # Whether pretrained `standard` is reliably above `none` on the average (None: not run).
  summary['glue_informative'] = reliably_better(avg['none']) if 'none' in avg else None
  return '\n'.join(lines), summary


def _glue_informative(a) -> list[str]:
  """A sentence saying the GLUE arm cannot rank encoders when pretrained `standard` is not
  reliably above the no-pretraining baseline on the average; [] when it is."""
  avg = a.gains.get('_average', {}) if a.gains else {}
  if 'none' not in avg or reliably_better(avg['none']):
    return []
  return ['**The GLUE arm is uninformative at this compute:** pretrained `standard` is not '
          'reliably better than the same architecture fine-tuned from random weights (`none`) '
          'on the average, so what pretraining put into the encoders does not reach these '
          'fine-tuning scores, and GLUE differences between the variants cannot be read as '
          'differences of their pretraining.', '']

def _verdict_section(diffs, verdicts, base, keys, margin, conf) -> list[str]:
  tost = tost_confidence(conf)
  pts = f'{100 * margin:g}'
  lines = [f'### Verdict against `{base}`', '',
           f'δ = {pts} point{"" if pts == "1" else "s"} (config.equivalence_margin). '
           f'**better**: the {conf:.0%} paired bootstrap interval and the {conf:.0%} seed t '
           f'interval of (variant − {base}) both lie above 0; **worse**: both below 0; '
           f'otherwise **equivalent within ±δ** when a two one-sided test at '
           f'{1 - conf:.0%} per side passes for both kinds of interval, that is when both '
           f'{tost:.0%} intervals (shown, bootstrap / t) lie strictly inside (−δ, +δ); '
           'otherwise **undecided** (the data cannot tell; more seeds or larger dev sets '
           'would).', '']
  head = ['variant'] + ['average' if t == '_average' else task_title(t) for t in keys]
  lines += reporting.md_table(head)
  for v, dd in diffs.items():
    cells = [v]
    for t in keys:
      d = dd.get(t)
      cells.append('–' if d is None else
                   f'**{verdict_text(verdicts[v][t], margin)}** ({_fmt_ci(d["boot_ci_tost"])} '
                   f'/ {_fmt_ci(d["t_ci_tost"])})')
    lines.append(reporting.md_row(cells))
  return lines + ['']


def _gains_section(gains, table, majority, base, baselines, keys, conf) -> list[str]:
  if not gains:
    return []
  lines = [f'### What pretraining buys: `{base}` against the majority class'
           + ''.join(f' and `{b}`' for b in baselines), '',
           f'×100, `{base}` minus the baseline: the point estimate, the {conf:.0%} paired '
           'bootstrap interval over dev examples (the majority class is scored on the same '
           'resamples) and the t interval over seeds (seed-paired for a baseline; the '
           'majority class is one constant). **reliably better**: both intervals above 0.'
           + ''.join(f' `{b}`: the `{base}` architecture and vocabulary fine-tuned from random '
                     'weights with the same recipe, seeds and training examples.'
                     for b in baselines), '',
           f'| task | baseline | {base} | baseline score | difference | {conf:.0%} paired '
           f'bootstrap | {conf:.0%} seed t | reliably better |', '|---|---|---|---|---|---|---|---|']
  for t in keys:
    for k, d in gains.get(t, {}).items():
      other = majority[t] if k == 'majority' else table[k][t]
      lines.append(f'| {"average" if t == "_average" else task_title(t)} | {k} | '
                   f'{_pct(table[base][t]["mean"])} | {_pct(other["mean"])} | '
                   f'{100 * d["diff"]:+.1f} | {_fmt_ci(d["boot_ci"])} | {_fmt_ci(d["t_ci"])} | '
                   f'{"yes" if reliably_better(d) else "no"} |')
  return lines + ['', gains_sentence(gains, base, baselines), '']


def _data_paths(config, workdir, variants) -> dict:
  """The corpus and GLUE data as the report shows them (sharedbert.utils.paths: never absolute)."""
  glue_dir, tfds_dir = study_plan._glue_source(config)
  return {'corpus': paths.display(study_plan.pretrain_config(config, variants[0]).data.corpus,
                                  workdir=workdir),
          'glue_dir': paths.display(glue_dir or '', workdir=workdir),
          'tfds_data_dir': paths.display(tfds_dir or '', workdir=workdir)}


def _header(config, workdir, variants, baselines, tasks, skipped, skipped_pairs) -> list[str]:
  p = study_plan.pretrain_config(config, variants[0])
  g = study_plan.glue_config(config, study_plan.pretrain_dir(workdir, variants[0]), 'all')
  m, o = p.model, p.optim
  data = _data_paths(config, workdir, variants)
  lines = [
      f'Variants: {", ".join(f"`{v}`" for v in variants)}'
      + ''.join(f'; baseline `{b}` (no pretraining)' for b in baselines)
      + f'. Written by `python -m sharedbert.lab.study` (configs/study.py:{config.preset}). Paths '
      'are as given when relative, else relative to the repository root or, as W/..., to '
      'the study\'s workdir.', '',
      '**Recipe (identical for every variant).** '
      f'Pretraining (`{config.pretrain.arg}`): {m.num_layers} layers, width {m.hidden_size}, '
      f'{m.num_heads} heads, FFN {m.mlp_dim}, vocabulary {m.vocab_size} (one sentencepiece '
      f'vocabulary, learned once), {"pre" if m.pre_layer_norm else "post"}-LayerNorm, dropout '
      f'{m.dropout_rate:g}, init std {m.initializer_range:g}; corpus `{data["corpus"]}`; '
      f'{p.total_steps} steps of batch {p.data.batch_size} × {p.data.seq_len} tokens, MLM '
      f'{p.data.mask_rate:.0%}, AdamW lr {o.lr:g} (b2 {o.b2:g}) with {o.warmup_steps} warmup '
      f'steps then linear decay, seed {p.seed}. '
      f'Fine-tuning (sharedbert.tasks.finetune): {config.seeds} seeds per task, '
      f'{g.num_epochs} epochs, batch {g.batch_size}, lr {g.optim.lr:g}, warmup '
      f'{g.optim.warmup_fraction:.0%}, sequence length {g.data.seq_len}'
      + (f', the classifier on the {g.pooling} of the last layer' if g.pooling != 'cls' else '')
      + (f', at most {g.data.max_train_examples:,} training examples per task (a fixed random '
         'subset, the same for every variant, baseline and seed)'
         if g.data.max_train_examples else '')
      + f'; data {("`" + data["glue_dir"] + "`") if data["glue_dir"] else "tfds glue/*"}. '
      'Scores are on the dev sets, at the last epoch (no selection on dev).'
      + ''.join(f' Baseline `{b}`: the `{study_plan.BASELINES[b]}` model (its config and the '
                'shared vocabulary) fine-tuned from random weights, with the same recipe, seeds and '
                'training examples; it is also scored for robustness and cross-domain '
                'transfer.' for b in baselines), '']
  notes = []
  if not tuple(config.squad.versions):
    notes.append('SQuAD is not part of this preset (no SQuAD data here); its code and tests '
                 'are in sharedbert/tasks/squad.py, and the gpu and pod presets run it.')
  auto = study_plan.listed_glue_tasks(config) is None
  notes += [f'GLUE task skipped: {task_title(t)}: {why}.' for t, why in skipped]
  skipped_names = {t for t, _ in skipped}
  absent = [t for t in glue.TASKS if t not in tasks and t not in skipped_names]
  if absent:
    why = ('not in the GLUE data' if auto else 'not listed in glue.tasks')
    notes.append(f'GLUE tasks not run: {", ".join(task_title(t) for t in absent)} ({why})'
                 + ('; the average below is over the tasks that were run, not GLUE\'s nine.'
                    if any(t not in AVERAGE_EXCLUDES for t in absent) else '.'))
  listed = [crossdomain.get_transfer(n).name for n in config.crossdomain.pairs]
  notes += [f'Cross-domain pair not run: {n}: {why}.' for n, why in skipped_pairs]
  not_listed = [n for n in crossdomain.TRANSFERS if n not in listed]
  if not_listed:
    notes.append(f'Cross-domain pairs not in crossdomain.pairs: {", ".join(not_listed)}; '
                 'the gpu and pod presets run the full matrix from tfds.')
  if notes:
    lines += ['**What this preset covers.**', ''] + [f'- {n}' for n in notes] + ['']
  return lines


def _squad_section(config, workdir, variants) -> list[str]:
  versions = tuple(config.squad.versions)
  if not versions:
    return ['Not run in this preset.', '']
  lines = []
  for version in versions:
    rows = []
    for v in variants:
      files = tf.io.gfile.glob(os.path.join(workdir, 'squad', v, f'v{version}', 'seed_*.json'))
      rs = [jsonio.read_json(f) for f in sorted(files)]
      if not rs:
        rows.append(f'| {v} | – | – |' + (' – | – |' if version == '2.0' else ''))
        continue
      def ms(key):
        m, s = stats.mean_std([r['metrics'][key] for r in rs])
        return f'{m:.1f} ± {s:.1f}'
      row = f'| {v} | {ms("exact")} | {ms("f1")} |'
      if version == '2.0':
        row += f' {ms("HasAns_f1")} | {ms("NoAns_f1")} |'
      rows.append(row)
    head = '| variant | EM | F1 |' + (' HasAns F1 | NoAns F1 |' if version == '2.0' else '')
    lines += [f'**SQuAD v{version}** (dev; official exact match and F1, ×100, mean ± std over '
              'seeds' + ('; no-answer threshold tuned on dev' if version == '2.0' else '') + ')',
              '', head, '|' + '---|' * (head.count('|') - 1)] + rows + ['']
  return lines


def write_report(config, workdir: str, variants) -> str:
  text, summary = build_report(config, workdir, variants)
  path = os.path.join(workdir, 'report.md')
  jsonio.write_text(path, text)
  jsonio.write_json(os.path.join(workdir, 'summary.json'), summary)
  return path
