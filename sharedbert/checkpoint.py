"""Orbax checkpoints under WORKDIR/checkpoints, and restore for notebooks.

Each checkpoint holds two items: `state` (step, parameters, optimizer state, counters),
saved asynchronously, and `meta` (JSON: the model config, the input pipeline's position,
the vocabulary size) used to check that a resume is compatible. Orbax writes each step to
a temporary directory and renames it when complete, so a kill during a save never leaves
a half-written step that a resume would pick up. A latest step that fails to restore (a
truncated file, say) is reported and the previous one is used.
"""

from __future__ import annotations

from typing import Any

from absl import logging
import orbax.checkpoint as ocp

from sharedbert.errors import UserError

CHECKPOINT_DIR = 'checkpoints'


def checkpoint_dir(workdir: str) -> str:
  return workdir.rstrip('/') + '/' + CHECKPOINT_DIR


class Checkpointer:
  """A CheckpointManager with the save policy from `config.ckpt`."""

  def __init__(self, workdir: str, ckpt_cfg=None, *, read_only: bool = False):
    policies = ocp.checkpoint_managers
    save_policy = None
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
        create=not read_only, read_only=read_only)
    self.directory = checkpoint_dir(workdir)
    self.manager = ocp.CheckpointManager(self.directory, options=options,
                                         item_names=('state', 'meta'))

  def all_steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def should_save(self, step: int) -> bool:
    return self.manager.should_save(step)

  def reached_preemption(self, step: int) -> bool:
    return self.manager.reached_preemption(step)

  def save(self, step: int, state: Any, meta: dict, *, force: bool = False) -> bool:
    return self.manager.save(
        step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                      meta=ocp.args.JsonSave(meta)), force=force)

  def restore_meta(self, step: int) -> dict:
    return self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))['meta']

  def restore(self, abstract_state: Any, step: int | None = None) -> tuple[Any, dict, int]:
    """Restores into `abstract_state` (ShapeDtypeStructs with the target shardings).

    With step=None tries the latest step, then older ones if it is damaged. Returns
    (state, meta, step).
    """
    steps = [step] if step is not None else self.all_steps()[::-1]
    if not steps:
      raise UserError(f'no checkpoint found in {self.directory}')
    errors = []
    for s in steps:
      try:
        out = self.manager.restore(s, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()))
        if errors:
          logging.warning('restored step %d instead of the damaged later step(s): %s', s,
                          '; '.join(errors))
        return out['state'], out['meta'], s
      except (ValueError, KeyError, TypeError) as e:
        raise UserError(f'checkpoint step {s} in {self.directory} does not fit this model: '
                        f'{str(e).splitlines()[0][:300]}') from e
      except Exception as e:  # A damaged step: log it and try the one before.
        msg = f'step {s}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ""}'
        logging.error('checkpoint %s is damaged (%s)', s, msg)
        errors.append(msg)
    raise UserError(f'no checkpoint in {self.directory} could be restored: {"; ".join(errors)}')

  def wait(self):
    self.manager.wait_until_finished()

  def close(self):
    self.manager.close()
