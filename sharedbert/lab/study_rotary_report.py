"""report.md of the rotary study (study_rotary.py): the pre-registered contrasts and their
answers first, then every arm, the selection, equivalence and reuse; from summary.json."""

from __future__ import annotations

import os

from sharedbert.lab import study_long_report
from sharedbert.lab import study_rotary
from sharedbert.utils import jsonio

REPORT_FILE = 'report.md'
SUMMARY_FILE = 'summary.json'
ARMS_PNG = 'arms.png'

_num = study_long_report._num  # pylint: disable=protected-access


def _interval(d: dict) -> str:
  return f'[{_num(d.get("ci_low"), sign=True)}, {_num(d.get("ci_high"), sign=True)}]'


def _p(p) -> str:
  """A p value to three places; below 0.001 it says so rather than printing 0.000."""
  return '< 0.001' if p is not None and p < 0.001 else _num(p)


def _p_clause(p) -> str:
  """'= 0.012' or '< 0.001', to follow a 'p'."""
  text = _p(p)
  return text if text.startswith('<') else f'= {text}'


def _seeds(d: dict) -> str:
  return f'{len(d.get("seeds") or [])} seeds'


_GAP_VERB = {'confirmed': 'narrowed', 'refuted': 'widened',
             'not shown': 'did not measurably narrow'}


def readme_sentence(summary: dict) -> str:
  """The study's answer in one paragraph, as the README and docs/study.md state it (and
  tests/test_docs.py holds them to it): H1 with its interval and power, `shared`'s gap under
  each kind of position, and H2-H7 with their answers.

  Args:
    summary: the study's summary.json.

  Returns:
    The paragraph, on one line.
  """
  i = summary['interaction']['rotary']
  if i.get('delta_nats') is None:
    return 'No result is claimed yet.'
  f = summary['factorial']

  def gap(arm: str) -> str:
    e = f.get(arm, {})
    if e.get('delta_nats') is None:
      return 'not finished'
    return f'{_num(e["delta_nats"], sign=True)} {_interval(e)}'

  power = i.get('power_at_0.2')
  text = (f'Rotary positions {_GAP_VERB[i["answer"]]} `shared`\'s gap (H1 {i["answer"]}): '
          f'(shared+rotary − standard+rotary) − (shared − standard) = '
          f'{_num(i["delta_nats"], sign=True)} {_interval(i)} nats over {_seeds(i)} '
          f'(p {_p_clause(i["p"])}; power {_num(power, 2) if power is not None else "n/a"} '
          f'at 0.2 nats). `shared` − `standard` is {gap("shared")} with learned positions '
          f'and {gap("shared+rotary")} with rotary.')
  parts = []
  for h in summary['preregistered']['hypotheses'][1:]:
    e = summary['effects'].get(h['name'], {})
    if e.get('delta_nats') is not None:
      parts.append(f'{h["id"]} {h["contrast"]} {_num(e["delta_nats"], sign=True)} '
                   f'{_interval(e)} ({e["answer"]})')
  if parts:
    text += ' Holm family H2–H7: ' + '; '.join(parts) + '.'
  if summary['runs_left']:
    text = (f'Partial ({summary["runs_finished"]} runs finished, about '
            f'{summary["runs_left"]} to go): ' + text)
  return text


def headline(summary: dict) -> list[str]:
  """The pre-registered hypotheses with their answers, H1 first."""
  pre = summary['preregistered']
  i = summary['interaction']['rotary']
  lines = [f'Pre-registered in `{pre["file"]}` (commit {pre["commit"][:10]}) before any run. '
           'Loss is held-out MLM loss in nats at '
           f'{summary["steps"]:,} steps ({study_long_report._tokens(summary["steps"] * summary["tokens_per_step"])} tokens); '  # pylint: disable=protected-access
           'every contrast is paired by seed; intervals are 95% t intervals.', '',
           f'**In one paragraph.** {readme_sentence(summary)}', '']
  if i.get('delta_nats') is None:
    lines.append('**H1 (headline).** Not answered yet: the four arms share fewer than two '
                 'finished verdict seeds.')
  else:
    power = i.get('power_at_0.2')
    lines.append(
        f'**H1 (headline): {i["answer"]}.** The interaction (shared+rotary − standard+rotary)'
        f' − (shared − standard) is {_num(i["delta_nats"], sign=True)} {_interval(i)} nats '
        f'over {_seeds(i)} (p {_p_clause(i["p"])}); the design\'s power to find 0.2 nats at '
        f'the spread measured here is {_num(power, 2) if power is not None else "n/a"}.')
  lines += ['', '| # | contrast | predicted | difference (nats) | Holm p | verdict | answer |',
            '|---|---|---|---|---|---|---|']
  for h in pre['hypotheses'][1:]:
    e = summary['effects'].get(h['name'], {})
    if e.get('delta_nats') is None:
      lines.append(f'| {h["id"]} | {h["contrast"]} | {h["predicted"]} | not finished | | | |')
      continue
    lines.append(f'| {h["id"]} | {h["contrast"]} | {h["predicted"]} | '
                 f'{_num(e["delta_nats"], sign=True)} {_interval(e)} ({_seeds(e)}) | '
                 f'{_p(e["p_diff_holm"])} | {e["verdict"]} | {e["answer"]} |')
  lines += ['', 'H2–H7 are one Holm family at 0.05; H1 is judged alone. A verdict is '
            '"equivalent" when the Holm-adjusted TOST at ±'
            f'{summary["margin_nats"]} nats passes, "better"/"worse" when the Holm-adjusted '
            'test of no difference does.']
  return lines


def arms_table(summary: dict) -> list[str]:
  lines = ['| arm | positions | φ | lr | seeds | mean loss | against | difference (nats) | '
           'verdict |', '|---|---|---|---|---|---|---|---|---|']
  for arm, e in summary['factorial'].items():
    lr = '' if e['lr'] is None else f'{e["lr"]:g}'
    diff = (f'{_num(e["delta_nats"], sign=True)} {_interval(e)}'
            if e.get('delta_nats') is not None else '')
    lines.append(f'| {arm} | {e["position_embeddings"]} | '
                 f'{"" if e["rope_query_phase"] is None else _num(e["rope_query_phase"], 1)} | '
                 f'{lr} | '
                 f'{len(e["seeds"])} | {_num(e["loss_mean"])} | {e["against"] or ""} | {diff} | '
                 f'{e["verdict"]} |')
  return lines


def selection_table(summary: dict) -> list[str]:
  seeds = ', '.join(str(s) for s in summary['selection_seeds'])
  lines = [f'Rates are chosen on seeds {seeds} (their mean), which no verdict uses. A choice '
           'is *bracketed* when it is not at an edge of the rates run and the runs at both '
           f'of its neighbours left the early plateau (mean loss below '
           f'{summary["plateau_nats"]} nats).', '',
           '| arm | mean loss by rate | chosen | bracketed | reused from the long study |',
           '|---|---|---|---|---|']
  for arm, s in summary['selection'].items():
    means = ', '.join(f'{lr}: {_num(x)}' for lr, x in s['means'].items())
    why = ('' if s['bracketed'] else ' (no rate chosen yet)' if s['chosen_lr'] is None
           else ' (at an edge)' if not s['interior']
           else ' (a neighbour ended on or past the plateau)')
    lines.append(f'| {arm} | {means} | {s["chosen_lr"] if s["chosen_lr"] is not None else ""}'
                 f' | {"yes" if s["bracketed"] else "no" + why} | '
                 f'{", ".join(s["reused"]) or "none"} |')
  return lines


def equivalence_table(summary: dict) -> list[str]:
  lines = ['The smallest margin each contrast\'s seeds could call equivalent were its mean 0: '
           'under Holm the first test of the family runs at 0.05/m, so that is the margin '
           'shown; the TOST power is at the study\'s own margin, with Holm.', '',
           '| contrast | seeds | sd (nats) | smallest margin, Holm | unadjusted | '
           f'TOST power at ±{summary["margin_nats"]} | seeds for it |', '|---|---|---|---|---|---|---|']
  for name, e in summary['equivalence'].items():
    lines.append(f'| {name} | {e["seeds"]} | {_num(e["sd_nats"])} | '
                 f'{_num(e["smallest_margin_holm"])} | {_num(e["smallest_margin_unadjusted"])} | '
                 f'{_num(e["tost_power_at_margin_holm"], 2)} | '
                 f'{e["seeds_for_margin_holm"] or "> 100"} |')
  return lines


def reread_section(summary: dict) -> list[str]:
  """The long study's shortest horizon read at another rate (summary.json `reread`)."""
  r = summary.get('reread')
  if not r:
    return []
  steps = r['steps']
  long_losses = ' / '.join(_num(x) for x in r['long_losses'].values())
  lines = ['', f'## The long study\'s {steps:,}-step point, re-read', '',
           f'`standard` at {steps:,} steps, verdict seeds {", ".join(r["long_losses"])}: at '
           f'{r["long_lr"]:g} (the long study\'s choice, on its seed 100) {long_losses}.']
  shared = r['shared_long']
  gap = r['gap_at_long_lr']
  lines.append(f'`shared` (the long study\'s runs: {shared["lr"]:g}, {shared["init"]} diagonals) '
               f'minus `standard`: {_num(gap["delta_nats"], sign=True)} {_interval(gap)} at '
               f'{r["long_lr"]:g}.')
  for lr, e in r['rates'].items():
    losses = ' / '.join(_num(x) for x in e['losses'].values()) or 'not finished'
    text = f'At {lr} (trained here): `standard` {losses}'
    if 'gap' in e:
      text += (f'; `shared` minus `standard` {_num(e["gap"]["delta_nats"], sign=True)} '
               f'{_interval(e["gap"])} ({len(e["gap"]["seeds"])} seeds)')
    lines.append(text + '.')
  lines.append('The `shared` runs are the long study\'s, from another machine; this study\'s '
               'RUN_NOTES.md says how closely its runs reproduce that machine\'s.')
  return lines


def load_sentence(summary: dict) -> str:
  """How busy the machine was: the 5-minute load average as each run ended."""
  load = summary.get('load_during')
  if not load or not load['runs']:
    return ''
  cpus = '/'.join(str(c) for c in load['cpu_count']) or '?'
  text = (f' The 5-minute load average as each run ended was {load["min"]:.2f}–'
          f'{load["max"]:.2f} (median {load["median"]:.2f}) on {cpus} cores')
  if load['runs'] < load['of']:
    text += (f', over {load["runs"]} of the {load["of"]} runs (the others finished before '
             'the study recorded it)')
  return text + '.'


def render(summary: dict, figures: tuple[str, ...] = ()) -> str:
  lines = ['# Does rotary close `shared`\'s gap? (the rotary study, issue 54)', '']
  lines += headline(summary)
  if summary['runs_left']:
    lines += ['', f'**Partial:** {summary["runs_finished"]} runs finished, about '
              f'{summary["runs_left"]} to go; every figure below is from the finished runs.']
  lines += ['', '## Every arm', '', 'Each arm at its chosen rate against `standard` with the '
            'same positions (`standard+rotary` against `standard`); one Holm family, '
            'descriptive.', '']
  lines += arms_table(summary)
  if figures:
    lines += ['', f'![arms]({figures[0]})']
  descriptive = {k: e for k, e in summary['effects'].items() if e.get('tested') is False}
  if descriptive:
    lines += ['', 'The same contrasts under rotary, reported, not tested:', '']
    lines += [f'- {k}: {e["minuend"]} − {e["subtrahend"]} = {_num(e["delta_nats"], sign=True)}'
              f' {_interval(e)} ({_seeds(e)})' for k, e in descriptive.items()]
  lines += reread_section(summary)
  lines += ['', '## Selection', ''] + selection_table(summary)
  lines += ['', '## Equivalence', ''] + equivalence_table(summary)
  r = summary['reuse']
  lines += ['', '## Reuse of the long study', '']
  if r['used']:
    lines.append(f'{r["runs"]} runs come from `{r["from"]}`: the check run ({r["check"]}) '
                 f'trained here ended at {r["here_loss"]:.7f} against {r["long_loss"]:.7f} '
                 f'there (|difference| {r["abs_diff"]:.1e} ≤ {r["tolerance"]:g}).')
  else:
    lines.append(f'Nothing reused: {r["why"]}.' + (
        f' The check run ({r["check"]}) ended at {r["here_loss"]:.7f} here against '
        f'{r["long_loss"]:.7f} there.' if 'here_loss' in r else ''))
  lines += ['', f'Runs trained here: {summary["runs_trained_here"]}, {summary["wall_s"]:,.0f} s '
            'of run wall time in all (two at a time); median '
            f'{_num(summary["step_time_median_s"], 4)} s a step.' + load_sentence(summary), '']
  return '\n'.join(lines)


def write_figures(summary: dict, workdir: str) -> list[str]:
  """arms.png: each arm's mean loss with its seeds, learned beside rotary."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  arms = [a for a, e in summary['factorial'].items() if e['losses']]
  if not arms:
    return []
  fig, ax = plt.subplots(figsize=(8, 4))
  for i, arm in enumerate(arms):
    e = summary['factorial'][arm]
    color = 'tab:orange' if e['position_embeddings'] == 'rotary' else 'tab:blue'
    ax.scatter([i] * len(e['losses']), e['losses'], s=12, color=color, alpha=0.6)
    ax.hlines(e['loss_mean'], i - 0.3, i + 0.3, color=color)
  ax.set_xticks(range(len(arms)))
  ax.set_xticklabels(arms, rotation=45, ha='right', fontsize=8)
  ax.set_ylabel('held-out MLM loss (nats)')
  ax.set_title(f'every arm at {summary["steps"]:,} steps: seeds and mean '
               '(blue learned, orange rotary)', fontsize=10)
  fig.tight_layout()
  path = os.path.join(workdir, ARMS_PNG)
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return [path]


def write_report(config, workdir: str) -> str:
  summary = study_rotary.analyse(config, workdir)
  jsonio.write_json(os.path.join(workdir, SUMMARY_FILE), summary)
  figures = tuple(os.path.basename(p) for p in write_figures(summary, workdir))
  path = os.path.join(workdir, REPORT_FILE)
  with open(path, 'w', encoding='utf-8') as f:
    f.write(render(summary, figures))
  return path
