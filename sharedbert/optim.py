"""The one optimizer and learning-rate schedule of every training loop: pretraining
(sharedbert.train), GLUE and SQuAD fine-tuning, the probes.

AdamW after global-norm clipping, weight decay on every parameter but biases, LayerNorm
and the shared-weight variants' scalars, under BERT's triangular schedule. Pretraining
counts warmup in steps (optim.warmup_steps); fine-tuning as a fraction of the task's steps
(optim.warmup_fraction), which `make_optimizer` turns into steps.
"""

import jax
import jax.numpy as jnp
import ml_collections
import optax

# The names of parameters that are exempt from weight decay: biases, LayerNorm, and the
# per-layer scalars and diagonals of the shared-weight variants.
NO_DECAY_NAMES = ('bias', 'scale', 'output_bias', 'diag', 'coefficients')

# SQuAD's optimizer where its config names only lr and warmup_fraction (BERT's values).
SQUAD_DEFAULTS = dict(weight_decay=0.01, b1=0.9, b2=0.999, eps=1e-6, grad_clip_norm=1.0)


def effective_warmup(warmup_steps: int, total_steps: int) -> int:
  """warmup_steps, or a tenth of the run when it is not shorter than the run.

  Clamped rather than refused: a preset's warmup with a shorter run (`:tiny` has 50,
  BERT's recipe 10,000; `--config.total_steps=40`) is the usual way to get here, and a rate
  still rising at the last step would never decay. A tenth is BERT fine-tuning's share.
  Pretraining says so in one warning line (`clamp_note`).

  Args:
    warmup_steps: optim.warmup_steps.
    total_steps: the run's steps.
  Returns:
    The warmup steps used.
  """
  warmup, total = max(int(warmup_steps), 0), max(int(total_steps), 1)
  return warmup if warmup < total else total // 10


def clamp_note(optim, total_steps: int) -> str:
  """The warning line for a clamped warmup, or ''.

  Args:
    optim: config.optim.
    total_steps: the run's steps.
  Returns:
    The line, or ''.
  """
  total_steps = int(optim.get('schedule_steps', 0) or total_steps)
  warmup = effective_warmup(optim.warmup_steps, total_steps)
  if warmup == int(optim.warmup_steps):
    return ''
  return (f'optim.warmup_steps={optim.warmup_steps} is not below total_steps={total_steps}: '
          f'warming up over {warmup} steps (a tenth of the run) instead, so that the rate '
          'still falls to 0; set optim.warmup_steps to choose')


def learning_rate_schedule(optim, total_steps: int):
  """The learning rate applied at step s (0-based): linear warmup over `warmup_steps` steps
  (lr·(s+1)/warmup, so the first step already learns), then linear decay that reaches 0 at
  the last step, total_steps - 1 (BERT's triangular schedule, ending exactly at zero). A
  warmup as long as the run is clamped (`effective_warmup`).

  Args:
    optim: a config section with lr and warmup_steps.
    total_steps: the schedule's length.
  Returns:
    step -> learning rate (a float32 scalar), traceable.
  """
  total = max(int(total_steps), 1)
  warmup = effective_warmup(optim.warmup_steps, total)
  lr = float(optim.lr)

  def schedule(step):
    s = jnp.asarray(step, jnp.float32)
    rise = lr * (s + 1.0) / max(warmup, 1)
    fall = lr * (total - 1.0 - s) / max(total - 1 - warmup, 1)
    return jnp.clip(jnp.where(s < warmup, rise, fall), 0.0, lr)
  return schedule


def decay_mask(params):
  """True for each parameter weight decay applies to (not biases, LayerNorm scales,
  diagonals, MASA coefficients).

  Args:
    params: the params tree.
  Returns:
    A tree of bools like `params`.
  """
  return jax.tree_util.tree_map_with_path(
      lambda path, _: getattr(path[-1], 'key', None) not in NO_DECAY_NAMES, params)


def with_warmup_steps(optim, total_steps: int):
  """`optim` with warmup_steps set from warmup_fraction (fine-tuning's recipe), when it
  has one; else `optim` itself.

  Args:
    optim: an optimizer config section.
    total_steps: the run's steps.
  Returns:
    The section (a copy when changed).
  """
  if 'warmup_fraction' not in optim:
    return optim
  out = ml_collections.ConfigDict(dict(optim))
  out.warmup_steps = int(round(float(optim.warmup_fraction) * total_steps))
  return out


def make_optimizer(optim, total_steps: int):
  """(optax transformation, schedule) for `total_steps` steps of `optim` (a config
  section: lr, warmup_steps or warmup_fraction, weight_decay, b1, b2, eps,
  grad_clip_norm, and optionally schedule_steps: a schedule longer than the run, so that a
  run stopped at total_steps and resumed with a larger one follows one schedule).

  Args:
    optim: the config section above.
    total_steps: the run's steps (warmup_fraction is a fraction of them).
  Returns:
    (tx, schedule): global-norm clipping then AdamW (no decay on biases, LayerNorms and
    diagonals: decay_mask), and step -> learning rate.
  """
  total_steps = int(optim.get('schedule_steps', 0) or total_steps)
  optim = with_warmup_steps(optim, total_steps)
  schedule = learning_rate_schedule(optim, total_steps)
  tx = optax.chain(
      optax.clip_by_global_norm(optim.grad_clip_norm),
      optax.adamw(schedule, b1=optim.b1, b2=optim.b2, eps=optim.eps,
                  weight_decay=optim.weight_decay, mask=decay_mask))
  return tx, schedule


# ---------------------------------------------------------------------------------------
# The non-finite guard of every training step (pretraining, the task engine, the probes).

def guarded_update(tx, grads, opt_state, params, loss, grad_norm=None):
  """(params, opt_state, finite) after one optimizer step that is applied only when the
  loss, the gradient and the update are all finite; otherwise parameters and optimizer
  state are kept (the schedule's step count still advances). A finite loss and gradient
  are not enough: a NaN learning rate, or an update that overflows, would write NaN into
  every parameter from the first step on.

  Args:
    tx: the optax transformation.
    grads, opt_state, params: as tx.update takes them.
    loss: the step's scalar loss.
    grad_norm: the gradient's global norm, if already computed.
  Returns:
    (params, opt_state, finite): finite is a boolean scalar, False for a skipped step.
  """
  grad_norm = optax.global_norm(grads) if grad_norm is None else grad_norm
  updates, new_opt_state = tx.update(grads, opt_state, params)
  finite = computed_once(jnp.isfinite(loss) & jnp.isfinite(grad_norm) & all_finite(updates))
  new_params = optax.apply_updates(params, updates)
  kept = jax.tree.map(lambda a, b: jnp.where(finite, a, b), new_params, params)
  return kept, keep_moments_advance_schedule(finite, new_opt_state, opt_state), finite


def keep_moments_advance_schedule(finite, new_opt_state, old_opt_state):
  """The optimizer state after a step: the new one if the step was finite; else the old
  one, except the learning-rate schedule's step count, which always advances. So the rate
  applied at step s is schedule(s) whether or not earlier steps were skipped (what the
  log shows), while Adam's moments and bias correction only count applied updates.

  Args:
    finite: whether the step's gradients were finite (a boolean scalar).
    new_opt_state, old_opt_state: the state after and before the update.
  Returns:
    The optimizer state to keep.
  """
  is_schedule = lambda x: isinstance(x, optax.ScaleByScheduleState)
  def pick(new, old):
    if is_schedule(new):
      return new
    return jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)
  return jax.tree.map(pick, new_opt_state, old_opt_state, is_leaf=is_schedule)


def computed_once(flag: jax.Array) -> jax.Array:
  """`flag` (a boolean scalar), made once for all its users. XLA fuses cheap element-wise
  ops into each consumer, so the chain of per-leaf `and`s behind the non-finite flag was
  copied into every one of the ~3 x leaves selects that read it: 6,732 `and`s in the tiny
  preset's step, whose CPU compile took 6.6 s with them and 3.7 s without (other backends'
  fusion passes were not checked). An `exp` is costly enough that XLA does not copy it, so
  the chain ends in a fusion of its own.
  exp(0) = 1 and exp(-inf) = 0 exactly: the flag is unchanged. (An optimization barrier is
  removed before fusion; a `lax.cond` would read the flag back to the host on GPUs.)

  Args:
    flag: a boolean scalar.
  Returns:
    The same value.
  """
  return jnp.exp(jnp.where(flag, 0.0, -jnp.inf)) > 0.5


@jax.jit
def all_finite(tree) -> jax.Array:
  """True when no leaf of `tree` holds a NaN or an infinity (one reduction on device).

  Args:
    tree: arrays.
  Returns:
    A boolean scalar.
  """
  leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
  return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)
