"""What the reports share: durations, percentages, markdown tables, figures and the load.

Kept by hand rather than taken from a library: a markdown table is three lines of code
(tabulate would be a dependency for them), and matplotlib is imported lazily here, in one
place, with the Agg backend (no display) and figures written through tf.io.gfile so that a
report may live on gs://.
"""

from __future__ import annotations

import io
import math
import os
import statistics

from sharedbert.utils import jsonio


def duration(seconds: float) -> str:
  """'1h02m03s', or '2m03s' under an hour (rounded to the second).

  Args:
    seconds: a duration.
  Returns:
    The text.
  """
  seconds = int(round(seconds))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f'{h}h{m:02d}m{s:02d}s' if h else f'{m}m{s:02d}s'


def pct(x) -> str:
  """A rate as points with one decimal (0.1234 -> '12.3'); '–' for None or NaN.

  Args:
    x: a fraction, or None.
  Returns:
    The text.
  """
  if x is None or (isinstance(x, float) and math.isnan(x)):
    return '–'
  return f'{100 * x:.1f}'


def md_row(cells) -> str:
  """One line of a markdown table.

  Args:
    cells: the cells.
  Returns:
    '| a | b |'.
  """
  return '| ' + ' | '.join(str(c) for c in cells) + ' |'


def md_table(head, rows=()) -> list[str]:
  """A markdown table's lines: the header, its rule, one line a row (cells as given).

  Args:
    head: the header cells.
    rows: the rows' cells.
  Returns:
    The lines.
  """
  return [md_row(head), '|' + '---|' * len(head)] + [md_row(row) for row in rows]


def pyplot():
  """matplotlib.pyplot with the Agg backend (no display needed).

  Returns:
    The module.
  """
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  return plt


def save_figure(fig, path: str, dpi: int = 90) -> None:
  """Writes `fig` as a PNG by way of memory, so that `path` may be remote (gs://), then
  closes it.

  Args:
    fig: a matplotlib figure.
    path: the PNG (local or gs://).
    dpi: its resolution.
  Returns:
    None.
  """
  buf = io.BytesIO()
  fig.savefig(buf, dpi=dpi, format='png')
  jsonio.write_text(path, buf.getvalue())
  pyplot().close(fig)


def machine_load() -> dict:
  """How busy the machine is now, for a run's record: the 1/5/15-minute load averages (the
  5-minute one covers most of a study's run) and the core count.

  Returns:
    {'load_avg_at_end': [1m, 5m, 15m], 'cpu_count': n}.
  """
  return {'load_avg_at_end': [round(x, 2) for x in os.getloadavg()],
          'cpu_count': os.cpu_count()}


def load_during(records) -> dict:
  """The 5-minute load average as each run ended, over the records that hold one.

  Args:
    records: run records (dicts), some with machine_load()'s keys.

  Returns:
    {'runs', 'of', 'min', 'median', 'max', 'cpu_count'}: the figures are None when no
    record holds a load (runs that finished before it was recorded).
  """
  records = list(records)
  loads = [r['load_avg_at_end'][1] for r in records if r.get('load_avg_at_end')]
  return {'runs': len(loads), 'of': len(records),
          'min': min(loads) if loads else None,
          'median': statistics.median(loads) if loads else None,
          'max': max(loads) if loads else None,
          'cpu_count': sorted({r['cpu_count'] for r in records if r.get('cpu_count')})}
