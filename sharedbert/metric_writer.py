"""Writes training metrics to the console, WORKDIR/metrics.jsonl and TensorBoard.

Only the chief process (process 0) writes; the others accept the calls and do nothing.
metrics.jsonl has one JSON object a line, always with 'step'; the TensorBoard event files
are under WORKDIR/tensorboard.
"""

from __future__ import annotations

import json
import math

from absl import logging
import tensorflow as tf


def _fmt(key, value):
  if isinstance(value, float):
    if key in ('learning_rate',):
      return f'{key}={value:.3g}'
    return f'{key}={value:.4g}'
  return f'{key}={value}'


class MetricWriter:

  def __init__(self, workdir: str, *, enabled: bool = True):
    self.enabled = enabled
    if not enabled:
      return
    self.path = workdir.rstrip('/') + '/metrics.jsonl'
    self._tb = tf.summary.create_file_writer(workdir.rstrip('/') + '/tensorboard')

  def write(self, step: int, metrics: dict, *, prefix: str = 'train', extra: str = ''):
    if not self.enabled:
      return
    clean = {k: (float(v) if not isinstance(v, (int, str)) else v) for k, v in metrics.items()}
    record = {'step': int(step), **{k: (None if isinstance(v, float) and not math.isfinite(v)
                                        else v) for k, v in clean.items()}}
    with tf.io.gfile.GFile(self.path, 'a') as f:
      f.write(json.dumps(record) + '\n')
    with self._tb.as_default(step=int(step)):
      for k, v in clean.items():
        if isinstance(v, (int, float)):
          tf.summary.scalar(k, v)
    self._tb.flush()
    text = ' '.join(_fmt(k, v) for k, v in clean.items())
    logging.info('[%s] step %d: %s%s', prefix, step, text, extra)

  def close(self):
    if self.enabled:
      self._tb.close()
