"""A GLUE seed's files: its dev predictions, its test submissions, and whether a finished
seed (its metrics.json, written last) may be reused for the settings asked now."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Optional

from absl import logging
import numpy as np
import tensorflow as tf

from sharedbert.data import glue
from sharedbert.errors import UserError
from sharedbert.models.bert import ModelConfig

# Written last: its presence marks the seed as finished.
SEED_METRICS = 'metrics.json'


def dev_predictions_name(spec, split: str) -> str:
  """The file of a dev split's predictions in a seed's folder.

  Args:
    spec: the TaskSpec.
    split: its dev split.
  Returns:
    'dev_predictions.tsv', 'dev_matched_predictions.tsv', ...
  """
  return glue.split_filename(spec, split)[:-len('.tsv')] + '_predictions.tsv'


def write_predictions(path, guids, predictions, labels):
  """A dev split's predictions beside their labels, one row an example.

  Args:
    path: the TSV (local or gs://).
    guids, predictions, labels: [n] arrays.
  Returns:
    None.
  """
  with tf.io.gfile.GFile(path, 'w') as f:
    f.write('index\tprediction\tlabel\n')
    for g, p, l in zip(guids.tolist(), predictions.tolist(), labels.tolist()):
      f.write(f'{g}\t{p!r}\t{l!r}\n')


def write_submission(path, spec, predictions):
  """glue.write_submission, by way of a local file so that `path` may be remote (gs://).

  Args:
    path: the submission file.
    spec: the TaskSpec.
    predictions: {guid: prediction}.
  Returns:
    None.
  """
  with tempfile.TemporaryDirectory() as tmp:
    local = os.path.join(tmp, os.path.basename(path))
    glue.write_submission(local, spec, predictions)
    tf.io.gfile.copy(local, path, overwrite=True)


def read_predictions(path, is_regression: bool):
  """The predictions column of write_predictions' file.

  Args:
    path: the TSV.
    is_regression: read floats (STS-B), else class ids.
  Returns:
    [n] array.
  """
  with tf.io.gfile.GFile(path) as f:
    rows = [line.split('\t') for line in f.read().splitlines()[1:]]
  cast = float if is_regression else int
  return np.asarray([cast(r[1]) for r in rows])


def current_form(fingerprint):
  """A stored fingerprint with its model written as today's code writes it: a seed finished
  when every model carried every variant's settings is the same model, and is reused.

  Args:
    fingerprint: a finished seed's stored fingerprint.
  Returns:
    The fingerprint, its model normalised (as it was when it cannot be read).
  """
  if not isinstance(fingerprint, dict) or not isinstance(fingerprint.get('model'), dict):
    return fingerprint
  try:
    model = ModelConfig.from_config(fingerprint['model']).to_dict()
  except (UserError, TypeError, ValueError):
    return fingerprint
  return {**fingerprint, 'model': json.loads(json.dumps(model))}


def load_seed_result(seed_dir: str, spec, fingerprint: dict) -> Optional[dict]:
  """A finished seed's record with its dev predictions, if its settings match.

  Args:
    seed_dir: the seed's folder.
    spec: the TaskSpec.
    fingerprint: the settings it must have been run with.
  Returns:
    The record, or None (run the seed).
  """
  path = os.path.join(seed_dir, SEED_METRICS)
  if not tf.io.gfile.exists(path):
    return None
  try:
    with tf.io.gfile.GFile(path) as f:
      record = json.load(f)
    if current_form(record.get('fingerprint')) != fingerprint:
      logging.warning('%s was made with other settings; running that seed again', path)
      return None
    for split, v in record['dev'].items():
      v['predictions'] = read_predictions(os.path.join(seed_dir, v['predictions_file']),
                                           spec.is_regression)
  except (OSError, tf.errors.OpError, ValueError, KeyError, IndexError) as e:
    logging.warning('cannot reuse %s (%s); running that seed again', path, e)
    return None
  return record
