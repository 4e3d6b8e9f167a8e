"""The study report's figures (matplotlib, Agg: no display needed), written by way of
memory so that the workdir may be remote (gs://)."""

from __future__ import annotations

import os

import numpy as np

from sharedbert.utils import jsonio
from sharedbert.utils import reporting
from sharedbert.lab import study_plan
from sharedbert.lab.study_stats import task_title

_save_figure = reporting.save_figure
_plt = reporting.pyplot


def plot_pretraining(workdir: str, variants, out_path: str) -> bool:
  plt = _plt()
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
  any_line = False
  for v in variants:
    lines = jsonio.read_jsonl(
        os.path.join(study_plan.pretrain_dir(workdir, v), 'metrics.jsonl'))
    tr = [(l['step'], l['loss']) for l in lines if 'loss' in l and 'step' in l]
    ev = [(l['step'], l['eval_loss']) for l in lines if 'eval_loss' in l]
    if tr:
      axes[0].plot(*zip(*tr), label=v)
      any_line = True
    if ev:
      axes[1].plot(*zip(*ev), marker='o', label=v)
  axes[0].set(title='pretraining MLM loss (train)', xlabel='step', ylabel='loss')
  axes[1].set(title='held-out MLM loss', xlabel='step', ylabel='loss')
  for ax in axes:
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  fig.tight_layout()
  _save_figure(fig, out_path)
  return any_line


def plot_glue(table: dict, variants, tasks, out_path: str) -> None:
  plt = _plt()
  cols = [t for t in tasks if any(t in table[v] for v in variants)] + (
      ['_average'] if any('_average' in table[v] for v in variants) else [])
  fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(cols) + 2), 3.8))
  width = 0.8 / len(variants)
  for i, v in enumerate(variants):
    xs, ys, lo, hi = [], [], [], []
    for j, t in enumerate(cols):
      e = table[v].get(t)
      if e is None:
        continue
      xs.append(j + (i - (len(variants) - 1) / 2) * width)
      ys.append(100 * e['mean'])
      lo.append(100 * (e['mean'] - e['ci'][0]))
      hi.append(100 * (e['ci'][1] - e['mean']))
    ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=v)
  ax.set_xticks(range(len(cols)))
  ax.set_xticklabels(['average' if t == '_average' else task_title(t) for t in cols])
  ax.set_ylabel('dev score ×100 (95% CI)')
  ax.axhline(0, color='black', lw=0.6)
  ax.grid(axis='y', alpha=0.3)
  ax.legend(fontsize=8)
  ax.set_title('GLUE dev scores: mean over seeds, bootstrap 95% CI')
  fig.tight_layout()
  _save_figure(fig, out_path)


def plot_robustness(rob: dict, variants, out_path: str) -> None:
  plt = _plt()
  tasks = list(rob)
  fig, axes = plt.subplots(1, len(tasks), figsize=(3.6 * len(tasks), 3.4), squeeze=False)
  for ax, t in zip(axes[0], tasks):
    for v in variants:
      e = rob[t].get(v)
      if e is None:
        continue
      ax.errorbar(100 * np.asarray(e['levels']), 100 * e['mean'], yerr=100 * e['std'],
                  marker='o', capsize=3, label=v)
    ax.set(title=task_title(t), xlabel='noise std, % of embedding std', ylabel='dev score ×100')
    ax.grid(alpha=0.3)
  axes[0][0].legend(fontsize=8)
  fig.tight_layout()
  _save_figure(fig, out_path)


def plot_time(pretrain: dict, epoch_times: dict, variants, out_path: str) -> None:
  plt = _plt()
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
  vs = [v for v in variants if pretrain.get(v, {}).get('step_time_median')]
  axes[0].bar(vs, [1000 * pretrain[v]['step_time_median'] for v in vs])
  axes[0].set(title='pretraining: median time per step', ylabel='ms')
  tasks = sorted({t for v in variants for t in epoch_times.get(v, {})})
  width = 0.8 / max(1, len(variants))
  for i, v in enumerate(variants):
    xs = [j + (i - (len(variants) - 1) / 2) * width for j, t in enumerate(tasks)
          if t in epoch_times.get(v, {})]
    ys = [epoch_times[v][t] for t in tasks if t in epoch_times.get(v, {})]
    axes[1].bar(xs, ys, width, label=v)
  axes[1].set_xticks(range(len(tasks)))
  axes[1].set_xticklabels([task_title(t) for t in tasks])
  axes[1].set(title='fine-tuning: seconds per epoch', ylabel='s')
  axes[1].legend(fontsize=8)
  for ax in axes:
    ax.grid(axis='y', alpha=0.3)
  fig.tight_layout()
  _save_figure(fig, out_path)
