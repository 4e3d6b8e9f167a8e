"""Memory benchmarks, from compilation alone: XLA's buffers for one training step, the
largest batch that fits the device's memory (with and without rematerialisation), and the
compile time of a step (unrolled or scanned layers; tools/compile_time.py)."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable

import flax.linen as nn
import jax

from sharedbert import pretrain_step
from sharedbert import sharding
from sharedbert.lab.bench.sizes import (GIB, Size, bench_config, memory_bytes, step_parts,
                                    synthetic_batch)

def memory_budget_bytes() -> tuple[int, str]:
  """What a step may use: the accelerator's memory, or 90% of the host's RAM on CPU (the
  rest is left to the process itself, the input pipeline and the OS)."""
  device = jax.devices()[0]
  stats = device.memory_stats() if device.platform != 'cpu' else None
  if stats and stats.get('bytes_limit'):
    return int(stats['bytes_limit']), f'{device.device_kind} memory'
  ram = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
  return int(0.9 * ram), f'90% of the host RAM ({ram / GIB:.1f} GiB)'


def step_memory_fn(size: Size, attention: str, remat: str) -> Callable[[int], int]:
  """batch -> XLA's memory for the training step at that batch, by compiling only.

  The state is created once (its layout does not depend on the batch); each call lowers the
  step for an abstract batch and reads the compiled executable's memory analysis.
  """
  config = bench_config(size, attention, remat=remat)
  mesh, axis_rules, model_cfg, model, tx, schedule = step_parts(config)
  init_rng, dropout_rng = jax.random.split(jax.random.key(0))
  state, state_shardings = pretrain_step.create_train_state(
      model, tx, init_rng, mesh, axis_rules, size.seq_len, size.max_predictions)
  del state
  target = pretrain_step.abstract_state(state_shardings, model, tx, size.seq_len, size.max_predictions)
  step_fn, _ = pretrain_step.jit_steps(model, tx, schedule, mesh, state_shardings, dropout_rng, 1)
  batch_sharding = sharding.batch_sharding(mesh)

  def memory(batch: int) -> int:
    example = synthetic_batch(dataclasses.replace(size, batch=1))
    abstract = {k: jax.ShapeDtypeStruct((batch, *v.shape[1:]), v.dtype, sharding=batch_sharding)
                for k, v in example.items()}
    with jax.set_mesh(mesh), nn.logical_axis_rules(axis_rules):
      lowered = step_fn.lower(target, abstract)
    # Buffer assignment precedes code generation, so the memory analysis does not depend on
    # the backend's optimisation level; level 0 compiles a third faster on a CPU (BERT-base).
    compiled = lowered.compile(compiler_options={'xla_backend_optimization_level': 0})
    return memory_bytes(compiled)

  return memory


def step_compile_seconds(size: Size, attention: str, *, scan_layers: bool,
                         remat: str | None = None) -> dict:
  """Seconds to lower and to compile the training step, layers unrolled or scanned
  (model.scan_layers); the state and batch are abstract, so nothing is allocated."""
  config = bench_config(size, attention, remat=remat)
  config.model.scan_layers = scan_layers
  mesh, axis_rules, _, model, tx, schedule = step_parts(config)
  shardings = pretrain_step.state_shardings(model, tx, mesh, axis_rules, size.seq_len,
                                    size.max_predictions)
  target = pretrain_step.abstract_state(shardings, model, tx, size.seq_len, size.max_predictions)
  step_fn, _ = pretrain_step.jit_steps(model, tx, schedule, mesh, shardings, jax.random.key(0), 1)
  batch_sharding = sharding.batch_sharding(mesh)
  batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=batch_sharding)
           for k, v in synthetic_batch(size).items()}
  with jax.set_mesh(mesh), nn.logical_axis_rules(axis_rules):
    t0 = time.perf_counter()
    lowered = step_fn.lower(target, batch)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
  return {'attention': attention, 'scan_layers': scan_layers, 'remat': config.model.remat,
          'lower_s': t1 - t0, 'compile_s': t2 - t1, 'memory_bytes': memory_bytes(compiled)}


def largest_fitting_batch(memory: Callable[[int], int], budget: int, *, multiple: int = 8,
                          probes: tuple[int, int] = (8, 16)) -> dict:
  """The largest batch (a multiple of `multiple`) whose step memory is within `budget`.

  Memory grows about linearly with the batch, so two compiles predict the limit; a
  bisection over multiples of `multiple`, started from that prediction, then confirms it
  with real compiles. Assumes memory does not decrease as the batch grows.
  """
  seen: dict[int, int] = {}

  def fits(batch: int) -> bool:
    if batch not in seen:
      seen[batch] = memory(batch)
    return seen[batch] <= budget

  a, b = probes
  fits(a), fits(b)
  slope = max((seen[b] - seen[a]) / (b - a), 1.0)
  predicted = int((budget - seen[a]) / slope) + a
  guess = max(multiple, predicted // multiple * multiple)
  # A bracket: `lo` fits (0: nothing does) and `hi` does not, widened by doubling steps.
  step = multiple
  if fits(guess):
    lo, hi = guess, guess + step
    while fits(hi):
      lo, step = hi, step * 2
      hi = lo + step
  else:
    lo, hi = max(guess - step, 0), guess
    while lo > 0 and not fits(lo):
      hi, step = lo, step * 2
      lo = max(hi - step, 0)
  while hi - lo > multiple:
    mid = (lo + hi) // 2 // multiple * multiple
    if fits(mid):
      lo = mid
    else:
      hi = mid
  return {'batch': lo, 'bytes': seen.get(lo), 'predicted': predicted,
          'compiles': len(seen), 'probed': dict(sorted(seen.items()))}
