"""Orbax checkpoints under WORKDIR/checkpoints: the package's one module that calls orbax.

Each checkpoint holds two items: `state` (step, parameters, optimizer state, counters),
saved asynchronously, and `meta` (JSON: the model config, the input pipeline's position,
the vocabulary size) used to check that a resume is compatible. Orbax writes each step to
a temporary directory and renames it when complete, so a kill during a save never leaves
a half-written step that a resume would pick up (the writer removes such leftovers when it
starts). A latest step that fails to restore (a truncated or missing file, say) is
reported and the previous one is used; `set_aside_damaged` then moves the damaged steps
out of the way, so that the resumed run can save those steps again.

A checkpoint proves itself: `save` records a fingerprint of the state in `meta` (a BLAKE2b
digest of each array's bytes, read on the host; multi-host runs, whose arrays are not all
in one process, record none), and `restore` recomputes it and checks that every float is
finite. A step whose bits changed after it was written (a same-size corruption that
reads without error) or whose state is not finite counts as damaged like a truncated one.

A checkpoint that cannot be written (disk full, no permission, a quota, a bucket gone) is a
`WriteFailed`: the run stops at once with one line (sharedbert.main's exit code 4) and the
last finalised checkpoint stays the one a rerun resumes from. On a local filesystem the
free space is checked before each save (orbax's background writers would otherwise fail
mid-write, with pages of tracebacks from their threads); other failures are caught where
orbax reports them: at the save, or, for an asynchronous save, after the first training
step that ends once it has failed (`poll`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import sys
import tempfile
import time
from typing import Any

from absl import logging
from etils import epath
import jax
import numpy as np
import orbax.checkpoint as ocp

from sharedbert import errors
from sharedbert.errors import UserError

CHECKPOINT_DIR = 'checkpoints'
DAMAGED_DIR = 'checkpoints-damaged'


FINGERPRINT_KEY = 'state_fingerprint'


def _host_leaf(x) -> np.ndarray:
  """A leaf as one host array (typed PRNG keys as their key data)."""
  if hasattr(x, 'dtype') and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  return np.ascontiguousarray(np.asarray(jax.device_get(x)))


def fingerprint(state) -> tuple[list[str] | None, bool]:
  """([a BLAKE2b digest of each leaf's bytes], whether every float leaf is finite) of a
  state. (None, True) when a leaf is not all in this process (a multi-host run): its bytes
  cannot be read here, so such checkpoints carry no fingerprint.

  Args:
    state: a train state (or any tree of arrays).
  Returns:
    (digests or None, all finite).
  """
  leaves = jax.tree.leaves(state)
  if any(isinstance(x, jax.Array) and not x.is_fully_addressable for x in leaves):
    return None, True
  digests, finite = [], True
  for x in leaves:
    a = _host_leaf(x)
    digests.append(hashlib.blake2b(a.view(np.uint8).reshape(-1), digest_size=8).hexdigest())
    if np.issubdtype(a.dtype, np.floating) or a.dtype.name == 'bfloat16':
      finite = finite and bool(np.isfinite(a.astype(np.float32)).all())
  return digests, finite


def verify(state, meta: dict) -> str | None:
  """Why a restored state is not the one saved (None when it verifies).

  Args:
    state: the restored state.
    meta: the checkpoint's meta, with the fingerprint written at save time.
  Returns:
    The reason, or None.
  """
  digests, finite = fingerprint(state)
  if not finite:
    return 'its state holds non-finite values'
  saved = meta.get(FINGERPRINT_KEY)
  # Restored into another layer layout (scanned or not), the leaves differ: nothing to match.
  if saved is not None and digests is not None and len(saved) == len(digests) \
      and saved != digests:
    bad = sum(1 for a, b in zip(saved, digests) if a != b)
    return f'{bad} of its {len(digests)} arrays differ from what was saved (checksum)'
  return None


def checkpoint_dir(workdir: str) -> str:
  """The absolute checkpoints/ folder of `workdir` (URLs kept as they are).

  Args:
    workdir: a run's workdir (local or a URL).
  Returns:
    WORKDIR/checkpoints, absolute.
  """
  # Absolute: orbax refuses a relative path (a user's --source=run), with a traceback.
  if '://' not in workdir:
    workdir = os.path.abspath(workdir)
  return workdir.rstrip('/') + '/' + CHECKPOINT_DIR


WriteFailed = errors.WriteFailed  # Defined beside UserError, for the entry point.


_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS, errno.EPERM, errno.EIO)


def write_failure_reason(error: BaseException) -> str:
  """The operating system's words for a failed write ('No space left on device'), found in
  the exception chain or in a tensorstore message ('[os_error_code='28']'); else the first
  line of the innermost message.

  Args:
    error: the exception a write raised.
  Returns:
    The reason in a few words.
  """
  seen = []
  e = error
  while e is not None and e not in seen:
    seen.append(e)
    if isinstance(e, OSError) and e.errno:
      return os.strerror(e.errno)
    code = re.search(r"os_error_code='?(\d+)", str(e))
    if code:
      return os.strerror(int(code.group(1)))
    for number in _WRITE_ERRNOS:  # TensorFlow's errors carry the words, not the number.
      if os.strerror(number) in str(e):
        return os.strerror(number)
    e = e.__cause__ or e.__context__
  text = str(seen[-1]).strip()
  return (text.splitlines()[0] if text else type(seen[-1]).__name__)[:200]


def _existing_dir(path: str) -> str:
  path = os.path.abspath(path)
  while not os.path.isdir(path) and os.path.dirname(path) != path:
    path = os.path.dirname(path)
  return path


def _size_text(n: float) -> str:
  return f'{n / 2**20:.1f} MiB' if n < 2**30 else f'{n / 2**30:.2f} GiB'


Unrestorable = errors.Unrestorable  # Defined beside UserError, for the entry point.


class DamagedCheckpoint(Exception):
  """A step that restores but is not what was saved, or not finite."""


def check_free_space(directory: str, state: Any, what: str, then: str) -> None:
  """Refuses (WriteFailed) a save of `state` that cannot fit on a local filesystem: orbax
  writes about the state's bytes (OCDBT compresses a little), before it removes the
  checkpoints it rotates out; a save that fails part-way prints tensorstore's noise.

  Args:
    directory: where the save goes.
    state: what is saved (its bytes are counted).
    what: how the refusal names it ('the checkpoint of step 500').
    then: what the user does next, appended to the refusal.
  Raises:
    WriteFailed: the disk holds less than the state needs.
  Returns:
    None.
  """
  if '://' in directory:
    return  # Object stores: their failures are caught where orbax reports them.
  need = sum(x.nbytes for x in jax.tree.leaves(state) if hasattr(x, 'nbytes')) + 2**20
  free = shutil.disk_usage(_existing_dir(directory)).free
  if free < need:
    raise WriteFailed(
        f'could not write {what} to {directory}: {os.strerror(errno.ENOSPC)} '
        f'({_size_text(free)} free, it needs about {_size_text(need)}); free some space or '
        f'move the workdir, {then}')


class Checkpointer:
  """A CheckpointManager with the save policy from `config.ckpt`."""

  def __init__(self, workdir: str, ckpt_cfg=None, *, read_only: bool = False):
    policies = ocp.checkpoint_managers
    save_policy = None
    if ckpt_cfg is not None and not int(ckpt_cfg.max_to_keep) >= 1:
      # orbax's LatestN(0) would delete every checkpoint, the newest included.
      raise UserError('ckpt.max_to_keep must be a positive integer (the newest checkpoints '
                      f'kept), got {ckpt_cfg.max_to_keep!r}')
    if ckpt_cfg is not None:
      # Save every N steps, and whenever orbax sees a preemption notice (pods, SLURM with
      # jax.distributed): `should_save` then answers True at the next step.
      save_policy = policies.AnySavePolicy([
          policies.FixedIntervalPolicy(int(ckpt_cfg.every_steps)),
          policies.PreemptionCheckpointingPolicy(),
      ])
    options = ocp.CheckpointManagerOptions(
        save_decision_policy=save_policy,
        preservation_policy=(policies.LatestN(int(ckpt_cfg.max_to_keep))
                             if ckpt_cfg is not None else None),
        enable_async_checkpointing=bool(ckpt_cfg.async_save) if ckpt_cfg is not None else False,
        # A kill during an async save leaves `<step>.orbax-checkpoint-tmp*`, which no
        # reader takes for a checkpoint; the next writer deletes it.
        cleanup_tmp_directories=not read_only,
        create=not read_only, read_only=read_only)
    self.directory = checkpoint_dir(workdir)
    self.damaged_steps: list[int] = []  # Steps that `restore` found unreadable.
    self._in_flight: int | None = None  # The step of a save not yet known to be complete.
    self.manager = ocp.CheckpointManager(self.directory, options=options,
                                         item_names=('state', 'meta'))

  def all_steps(self) -> list[int]:
    """The steps of every checkpoint in the folder, oldest first."""
    return sorted(self.manager.all_steps())

  def latest_step(self) -> int | None:
    """The newest checkpoint's step, or None when there is none."""
    return self.manager.latest_step()

  def should_save(self, step: int) -> bool:
    """Whether the save policy (every_steps, preemption) saves at `step`."""
    return self.manager.should_save(step)

  def reached_preemption(self, step: int) -> bool:
    """Whether a preemption notice has reached this process by `step`."""
    return self.manager.reached_preemption(step)

  def save(self, step: int, state: Any, meta: dict, *, force: bool = False) -> bool:
    """Starts saving `step` (finished in the background when ckpt.async_save is on).
    Raises WriteFailed when it cannot be written, or an earlier save failed."""
    self.wait()  # An earlier save's failure is that save's, and is said as such.
    check_free_space(self.directory, state, f'checkpoint {step}',
                     'then run the same command to resume')
    meta = {**meta, FINGERPRINT_KEY: fingerprint(state)[0]}
    try:
      saved = self.manager.save(
          step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                        meta=ocp.args.JsonSave(meta)), force=force)
    except Exception as e:  # pylint: disable=broad-except
      raise self._failed(step, e) from e
    self._in_flight = step if saved else None
    return saved

  def _failed(self, step: int, error: BaseException) -> WriteFailed:
    what = f'checkpoint {step}' if step is not None else 'a checkpoint'
    return WriteFailed(f'could not write {what} to {self.directory}: '
                       f'{write_failure_reason(error)}')

  def poll(self):
    """Raises WriteFailed if an asynchronous save has ended in failure (cheap: called after
    every training step, so that no step runs once a failure is known)."""
    if self._in_flight is not None and not self.manager.is_saving_in_progress():
      self.wait()

  def restore_meta(self, step: int) -> dict:
    """The JSON meta (data position, model, pending metrics) saved with `step`."""
    return self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))['meta']

  def latest_meta(self) -> tuple[int, dict] | None:
    """(step, meta) of the newest step whose meta reads, or None if there is no step."""
    for s in self.all_steps()[::-1]:
      try:
        return s, self.restore_meta(s)
      except Exception as e:  # A damaged step: restore() will report and skip it too.
        logging.warning('checkpoint %d in %s: its metadata does not read (%s)', s,
                        self.directory, _first_line(e))
    return None

  def restore(self, abstract_state: Any, step: int | None = None) -> tuple[Any, dict, int]:
    """Restores into `abstract_state` (ShapeDtypeStructs with the target shardings).

    With step=None tries the latest step, then older ones while they fail to restore
    (`damaged_steps` lists those). Returns (state, meta, step).
    """
    steps = [step] if step is not None else self.all_steps()[::-1]
    if not steps:
      raise UserError(f'no checkpoint found in {self.directory}')
    errors = []
    self.damaged_steps = []
    for s in steps:
      try:
        with _without_closed_loop_noise():
          out = self.manager.restore(s, args=ocp.args.Composite(
              state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()))
        why = verify(out['state'], out['meta'])
        if why:
          raise DamagedCheckpoint(f'it does not verify: {why}')
      except Exception as e:  # pylint: disable=broad-except
        # Damage shows as many types (JSON, tensorstore, ValueError on a missing file).
        msg = f'step {s}: {_first_line(e)}'
        logging.error('checkpoint %d in %s is damaged and cannot be restored: %s', s,
                      self.directory, msg)
        errors.append(msg)
        self.damaged_steps.append(s)
        continue
      if errors:
        logging.warning('restored checkpoint %d instead of the damaged later step(s) %s',
                        s, ', '.join(str(d) for d in self.damaged_steps))
      return out['state'], out['meta'], s
    raise Unrestorable(f'no checkpoint in {self.directory} could be restored ({"; ".join(errors)}); '
                       f'move {self.directory} away to start over, or use another --workdir')

  def wait(self):
    """Blocks until the save in flight has finished; raises WriteFailed if it failed."""
    try:
      self.manager.wait_until_finished()
    except Exception as e:  # pylint: disable=broad-except
      step, self._in_flight = self._in_flight, None
      raise self._failed(step, e) from e
    self._in_flight = None
    # Orbax runs the removal of unfinished saves in the background and waits for it only
    # at the next save; a run that stops before saving must not leave it half done.
    getattr(self.manager, '_maybe_await_cleanup_tmp_directory', lambda: None)()

  def close(self):
    """Waits for saves in flight and releases the manager."""
    self.manager.close()


_NOISE = ('Traceback (most recent call last)', 'base_events.py', '_check_closed',
          'Event loop is closed')


@contextlib.contextmanager
def _without_closed_loop_noise():
  """stderr (the file descriptor: tensorstore's threads print there directly) without the
  tracebacks of 'Event loop is closed' that the reads still in flight print when a damaged
  checkpoint fails part-way and orbax has closed its event loop; everything else is kept,
  in order."""
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile(mode='w+b') as captured:
    os.dup2(captured.fileno(), 2)
    try:
      yield
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      captured.seek(0)
      lines = captured.read().decode('utf-8', 'replace').splitlines(keepends=True)
      kept = [l for l in lines if l.strip() and not any(n in l for n in _NOISE)
              and l.strip() not in ('RuntimeError', ':', 'RuntimeError:')]
      if kept:
        sys.stderr.write(''.join(kept))
        sys.stderr.flush()


def set_aside_damaged(workdir: str, steps: list[int]):
  """Moves damaged steps to WORKDIR/checkpoints-damaged/, out of the manager's sight.

  Args:
    workdir: the run's workdir.
    steps: the damaged steps.
  Returns:
    None.
  """
  import tensorflow as tf
  if not steps:
    return
  dest_root = workdir.rstrip('/') + '/' + DAMAGED_DIR
  tf.io.gfile.makedirs(dest_root)
  for s in steps:
    src = f'{checkpoint_dir(workdir)}/{s}'
    dst = f'{dest_root}/{s}-{time.strftime("%Y%m%d-%H%M%S")}'
    try:
      tf.io.gfile.rename(src, dst)
      logging.warning('moved the damaged checkpoint %s to %s', src, dst)
    except Exception as e:  # Object stores cannot rename directories: delete it instead.
      logging.warning('could not move the damaged checkpoint %s (%s); deleting it', src,
                      _first_line(e))
      tf.io.gfile.rmtree(src)


def _first_line(e: BaseException) -> str:
  text = str(e).strip()
  line = text.splitlines()[0] if text else ''
  line = line.split(' See full TensorStore details')[0]  # The rest is a repr, not details.
  return f'{type(e).__name__}: {line[:200]}'


# ---------------------------------------------------------------------------------------
# Reading parts of a checkpoint: the package's one place that restores with orbax outside
# the Checkpointer (sharedbert.runs.open_run and the fine-tuned classifiers use these).

def _state_path(workdir: str, step: int):
  return epath.Path(f'{checkpoint_dir(workdir)}/{step}/state')


def _walk(tree, part: tuple[str, ...]):
  for key in part:
    tree = tree.get(key) if isinstance(tree, dict) else None
    if tree is None:
      return None
  return tree


def tree_shapes(tree) -> dict[str, tuple]:
  """{'a/b/c': shape} of every leaf of `tree` (arrays, ShapeDtypeStructs or orbax
  metadata).

  Args:
    tree: arrays, ShapeDtypeStructs or orbax metadata.
  Returns:
    {'a/b/c': shape tuple} for every leaf.
  """
  return {'/'.join(str(getattr(k, 'key', k)) for k in path): tuple(leaf.shape)
          for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def saved_part(workdir: str, step: int, part: tuple[str, ...] = ('params',)):
  """The metadata of `part` of a checkpoint's train state, reading no array.

  Args:
    workdir: the run's --workdir.
    step: a completed checkpoint step.
    part: the keys from the state's root to the part, as read_part takes them.
  Returns:
    The part's tree, leaves with .shape and .dtype; None if the checkpoint has no such part.
  """
  handler = ocp.PyTreeCheckpointHandler()
  try:
    meta = handler.metadata(_state_path(workdir, step))
  finally:
    handler.close()
  return _walk(dict(getattr(meta, 'tree', meta)), part)


def read_part(workdir: str, step: int, target, part: tuple[str, ...] = ('params',)):
  """Reads only `part` of checkpoint `step`'s train state (orbax partial restore: the rest,
  the optimizer state say, is not read), placed as `target`'s ShapeDtypeStructs say.

  Args:
    workdir: the run's --workdir.
    step: a completed checkpoint step.
    target: the part's abstract tree (jax.ShapeDtypeStruct leaves with shardings).
    part: the keys from the state's root to the part ('params', 'bert' for the encoder).
  Returns:
    The part as jax arrays on target's shardings.
  """
  item = target
  for key in reversed(part):
    item = {key: item}
  handler = ocp.PyTreeCheckpointHandler()
  try:
    restored = handler.restore(_state_path(workdir, step), args=ocp.args.PyTreeRestore(
        item=item, restore_args=ocp.checkpoint_utils.construct_restore_args(item),
        partial_restore=True))
  finally:
    handler.close()
  return _walk(restored, part)


def epoch_manager(seed_dir: str, *, max_to_keep: int | None = None, best_fn=None,
                  read_only: bool = False) -> ocp.CheckpointManager:
  """The orbax manager of a fine-tuned seed's models, synchronous: an epoch's save is small.

  Args:
    seed_dir: the seed's folder; its models go to SEED_DIR/checkpoints, one step per kept
      epoch, with items `params` and JSON `meta`.
    max_to_keep: epochs kept (None: all).
    best_fn: meta -> score, to keep the best epochs instead of the last.
    read_only: open for reading (nothing is created).
  Returns:
    The orbax CheckpointManager; the caller closes it.
  """
  kw = {} if max_to_keep is None else {'max_to_keep': int(max_to_keep)}
  if best_fn is not None:
    kw.update(best_fn=best_fn, best_mode='max')
  return ocp.CheckpointManager(
      os.path.join(seed_dir, CHECKPOINT_DIR),
      options=ocp.CheckpointManagerOptions(create=not read_only, read_only=read_only,
                                           enable_async_checkpointing=False, **kw),
      item_handlers={'params': ocp.PyTreeCheckpointHandler(),
                     'meta': ocp.JsonCheckpointHandler()})


def save_epoch(manager: ocp.CheckpointManager, epoch: int, params, meta: dict) -> None:
  """Saves a fine-tuned epoch and waits: the next training step donates (frees) the params.

  Args:
    manager: epoch_manager's.
    epoch: the step to save as.
    params: the classifier's parameters.
    meta: JSON with the epoch's dev `score`, which a best-epoch manager ranks by.
  Returns:
    None.
  """
  manager.save(epoch, args=ocp.args.Composite(params=ocp.args.PyTreeSave(params),
                                              meta=ocp.args.JsonSave(meta)),
               metrics={'score': meta['score']})
  manager.wait_until_finished()


def read_epoch_meta(manager: ocp.CheckpointManager, step: int) -> dict:
  """A kept epoch's JSON meta (its epoch, dev `score` and dev metrics).

  Args:
    manager: a fine-tuned seed's manager (classifiers.classifier_manager).
    step: the epoch.
  Returns:
    {'epoch', 'score', 'dev'}.
  """
  return manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))['meta']


def read_epoch_params(manager: ocp.CheckpointManager, step: int, target):
  """A kept epoch's parameters, placed as `target`'s ShapeDtypeStructs say.

  Args:
    manager: a fine-tuned seed's manager.
    step: the epoch.
    target: the classifier's params as ShapeDtypeStructs with shardings.
  Returns:
    The params, placed on the devices.
  """
  return manager.restore(step, args=ocp.args.Composite(params=ocp.args.PyTreeRestore(
      item=target, restore_args=jax.tree.map(
          lambda t: ocp.ArrayRestoreArgs(sharding=t.sharding), target))))['params']
