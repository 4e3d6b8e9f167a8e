"""Writes training metrics to the console, WORKDIR/metrics.jsonl and TensorBoard.

Only the chief process (process 0) writes; the others accept the calls and do nothing.
metrics.jsonl has one JSON object a line, always with 'step'; the TensorBoard event files
are under WORKDIR/tensorboard. A resumed run first drops the lines after the step it
resumes from (a killed run wrote them, and they will be written again), so metrics.jsonl
stays one history; TensorBoard itself discards the events of a restarted step range. A
write that fails (disk full, permissions) raises checkpoint.WriteFailed: the run stops.
"""

from __future__ import annotations

import json
import math

from absl import logging
import tensorflow as tf

from sharedbert.checkpoint import WriteFailed, write_failure_reason


def _fmt(key, value):
  if isinstance(value, float):
    if key in ('learning_rate',):
      return f'{key}={value:.3g}'
    return f'{key}={value:.4g}'
  return f'{key}={value}'


class MetricWriter:

  """Writes metrics.jsonl and TensorBoard summaries (process 0 only); a failed write is a
  WriteFailed."""
  def __init__(self, workdir: str, *, enabled: bool = True, resume_step: int | None = None):
    """With `resume_step`, first keeps only the lines up to that step (see the docstring)."""
    self.enabled = enabled
    if not enabled:
      return
    self.path = workdir.rstrip('/') + '/metrics.jsonl'
    if resume_step is not None:
      drop_lines_after(self.path, resume_step)
    self._tb = tf.summary.create_file_writer(workdir.rstrip('/') + '/tensorboard')

  def write(self, step: int, metrics: dict, *, prefix: str = 'train', extra: str = ''):
    """Appends {'step', **metrics} to metrics.jsonl and TensorBoard, and logs them in one
    line tagged `prefix`."""
    if not self.enabled:
      return
    clean = {k: (float(v) if not isinstance(v, (int, str)) else v) for k, v in metrics.items()}
    record = {'step': int(step), **{k: (None if isinstance(v, float) and not math.isfinite(v)
                                        else v) for k, v in clean.items()}}
    try:
      with tf.io.gfile.GFile(self.path, 'a') as f:
        f.write(json.dumps(record) + '\n')
      with self._tb.as_default(step=int(step)):
        for k, v in clean.items():
          if isinstance(v, (int, float)):
            tf.summary.scalar(k, v)
      self._tb.flush()
    except (OSError, tf.errors.OpError) as e:
      # A run that cannot record its metrics stops, like one that cannot save.
      raise WriteFailed(f'could not write the metrics of step {step} to {self.path}: '
                        f'{write_failure_reason(e)}') from e
    text = ' '.join(_fmt(k, v) for k, v in clean.items())
    logging.info('[%s] step %d: %s%s', prefix, step, text, extra)

  def close(self):
    """Flushes and closes the summary writer."""
    if self.enabled:
      self._tb.close()


def drop_lines_after(path: str, step: int) -> int:
  """Keeps the lines of `path` with 'step' <= step (and drops a torn last line).

  Rewrites the file through a temporary one and a rename, so a kill leaves either the old
  or the new file. Returns the number of lines dropped.

  Args:
    path: a metrics.jsonl.
    step: the last step kept.
  Returns:
    As above.
  """
  if not tf.io.gfile.exists(path):
    return 0
  with tf.io.gfile.GFile(path, 'r') as f:
    text = f.read()
  lines = text.splitlines()
  kept = []
  for line in lines:
    try:
      record = json.loads(line)
    except ValueError:  # Torn by a kill in mid-write.
      continue
    if isinstance(record, dict) and int(record.get('step', 0)) <= step:
      kept.append(line)
  if len(kept) == len(lines) and (not text or text.endswith('\n')):
    return 0
  tmp = path + '.tmp'
  with tf.io.gfile.GFile(tmp, 'w') as f:
    f.write(''.join(line + '\n' for line in kept))
  tf.io.gfile.rename(tmp, path, overwrite=True)
  logging.info('%s: dropped %d line(s) after step %d, written by an earlier, interrupted run',
               path, len(lines) - len(kept), step)
  return len(lines) - len(kept)
