"""Keeps a long-running study's finished runs beyond the machine that trained them.

A study of many hours can outlive its machine. With `--archive=DIR`, every run that
finishes also leaves its done file (study_done.json: the held-out figures and curve the
report reads) and the config it trained with under DIR/<variant>/<tag>/, a folder small
enough to commit. A study started on another machine with the same DIR first copies into
its workdir the done file of every archived run whose config is the one it would train
now, so those runs are not trained again. The archive also records the SHA-256 of the
study's vocabulary: a study whose vocabulary came out differently refuses the archive
rather than mix token ids.

Only the done file travels, not checkpoints: fine for a study whose report reads nothing
else of a run (the rotary study), not for one that reopens its checkpoints (the long
study's attention statistics).
"""

from __future__ import annotations

import hashlib
import json
import os

from absl import logging

from sharedbert.errors import UserError
from sharedbert.data import tokenizer as tokenizer_lib
from sharedbert.lab import study_long
from sharedbert.lab import study_plan
from sharedbert.models.bert import ModelConfig
from sharedbert.utils import jsonio
from sharedbert.utils.paths import gfile

CONFIG_FILE = 'run_config.json'
VOCAB_HASH_FILE = 'vocab.sha256'
# Where the data lives differs between machines and changes no result.
_WHERE_KEYS = ('corpus', 'tfds_data_dir')


def _sha256(path: str) -> str:
  with gfile().GFile(path, 'rb') as f:
    return hashlib.sha256(f.read()).hexdigest()


def same_training(a: dict, b: dict) -> bool:
  """Whether two run configs (as dicts) train the same run: equal but for where the data
  lives, with the models compared as ModelConfigs (so a setting spelled in an older form
  still matches)."""
  a, b = json.loads(json.dumps(a)), json.loads(json.dumps(b))
  for cfg in (a, b):
    for key in _WHERE_KEYS:
      cfg.get('data', {}).pop(key, None)
  model_a, model_b = a.pop('model', {}), b.pop('model', {})
  try:
    same_model = ModelConfig.from_config(model_a) == ModelConfig.from_config(model_b)
  except (UserError, TypeError, ValueError):
    same_model = model_a == model_b
  return same_model and a == b


def check_vocab(archive: str, vocab_path: str) -> None:
  """Records the vocabulary's hash in a new archive; refuses an archive made with another."""
  digest = _sha256(vocab_path)
  hash_file = os.path.join(archive, VOCAB_HASH_FILE)
  if not gfile().exists(hash_file):
    jsonio.write_text(hash_file, digest + '\n')
    return
  with gfile().GFile(hash_file) as f:
    archived = f.read().strip()
  if archived != digest:
    raise UserError(f'the archive {archive} holds runs trained with another vocabulary '
                    f'(sha256 {archived[:12]}…, this study learned {digest[:12]}…); give '
                    'this study a new --archive folder, or the workdir those runs used')


def restore(archive: str, config_of, folder_of) -> int:
  """Copies the done file of each archived run into its run folder where it is missing
  and its archived config equals the one the study would train now.

  Args:
    archive: the archive folder.
    config_of: (variant, tag) -> the run's config as a dict, or None where the study has
      no such run.
    folder_of: (variant, tag) -> the run's folder in this workdir.
  Returns:
    How many runs were restored.
  """
  restored = stale = 0
  for done in sorted(gfile().glob(os.path.join(archive, '*', '*', study_plan.DONE_FILE))):
    folder = os.path.dirname(done)
    variant, tag = os.path.basename(os.path.dirname(folder)), os.path.basename(folder)
    target = os.path.join(folder_of(variant, tag), study_plan.DONE_FILE)
    if gfile().exists(target):
      continue
    now = config_of(variant, tag)
    if now is None or not same_training(
        jsonio.read_json(os.path.join(folder, CONFIG_FILE)), now):
      stale += 1
      logging.warning('study archive: %s/%s is not a run this study would train now; it '
                      'is left out', variant, tag)
      continue
    gfile().makedirs(os.path.dirname(target))
    gfile().copy(done, target, overwrite=True)
    restored += 1
  logging.info('study archive: %d finished runs restored from %s (%d left out)', restored,
               archive, stale)
  return restored


def holds(archive: str, variant: str, tag: str) -> bool:
  """Whether the archive has this run's done file."""
  return gfile().exists(os.path.join(archive, variant, tag, study_plan.DONE_FILE))


def save(archive: str, variant: str, tag: str, cfg: dict, summary: dict) -> None:
  """Archives one finished run: its config (less where the data lived on this machine),
  then its done file (so a done file in the archive always has its config beside it)."""
  folder = os.path.join(archive, variant, tag)
  cfg = json.loads(json.dumps(cfg))
  for key in _WHERE_KEYS:
    cfg.get('data', {}).pop(key, None)
  jsonio.write_json(os.path.join(folder, CONFIG_FILE), cfg, sort_keys=True)
  jsonio.write_json(os.path.join(folder, study_plan.DONE_FILE), summary)


def attach(archive: str, config, workdir: str, config_fn):
  """Readies a long-design study's workdir from the archive (see the module's docstring):
  the vocabulary checked, archived runs restored, runs the workdir finished before it had
  the archive archived. Returns the `on_finished(run, summary)` that archives each run that
  finishes (study_long.run_all's)."""
  study_long.prepare_vocab(config, workdir, None)
  check_vocab(archive, os.path.join(workdir, study_long.VOCAB_DIR, tokenizer_lib.VOCAB_FILE))

  def config_of(variant, tag):
    run = study_long.parse_tag(variant, tag)
    try:
      return None if run is None else config_fn(config, run).to_dict()
    except (KeyError, ValueError, UserError):  # Not a run of this design.
      return None

  restore(archive, config_of, lambda variant, tag: os.path.join(
      workdir, study_long.RUNS_DIR, variant, tag))

  def on_finished(run, summary):
    save(archive, run.variant, run.tag, config_fn(config, run).to_dict(), summary)

  for run, summary in study_long.load_results(workdir).items():
    if not holds(archive, run.variant, run.tag):
      on_finished(run, summary)
  return on_finished
