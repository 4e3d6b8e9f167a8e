"""Independent training runs, `workers` at a time, in spawned processes (one core each).

The study's pretraining arms and the probes' runs are many small, independent jobs: on a
2-core machine two processes pinned to a core each train about twice as many per hour as
one process whose small matrix products cannot keep both cores busy.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import signal
from typing import Any, Callable, Iterable
import ctypes

from absl import logging
import jax


from sharedbert import interrupts


KEPT = 'finished runs are kept, interrupted ones resume from their checkpoints'

# The process that started this worker (set by init_worker; None outside a worker).
_PARENT_PID = None


def init_worker(counter, cache_dir: str, verbosity: int | None = None,
                parent_pid: int | None = None) -> None:
  """A worker process: one core of its own, dies with its parent (SIGTERM, which train.py
  answers by checkpointing), signals only flagged (interrupts.flag_only), the parent's
  compilation cache and log verbosity (so that the runs' progress and ETA lines reach the
  parent's log).

  Args:
    counter: a shared counter, from which each worker takes its core.
    cache_dir: the compilation cache ('' for none).
    verbosity: absl's verbosity, or None.
    parent_pid: the parent's pid.
  Returns:
    None.
  """
  global _PARENT_PID
  interrupts.flag_only()
  _PARENT_PID = parent_pid
  with counter.get_lock():
    index = counter.value
    counter.value += 1
  cpus = sorted(os.sched_getaffinity(0))
  os.sched_setaffinity(0, {cpus[index % len(cpus)]})
  try:
    ctypes.CDLL('libc.so.6').prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG.
  except OSError:
    pass
  if verbosity is not None:
    logging.set_verbosity(verbosity)
  if cache_dir:
    jax.config.update('jax_compilation_cache_dir', cache_dir)
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 1.0)


def call_if_parent_alive(fn: Callable, *args):
  """fn(*args) in a worker, unless its parent has died: the pool queues a job ahead of a
  free worker, and an orphan that took it would train on with no one to read the result
  (a killed study's workers went on to the next queued run).

  Args:
    fn: the job's function.
    *args: its arguments.
  Returns:
    fn's result.
  """
  if _PARENT_PID is not None and os.getppid() != _PARENT_PID:
    os._exit(1)
  return fn(*args)


def _verbosity() -> int:
  return logging.get_verbosity()


def run_all(jobs: Iterable[Any], fn: Callable, args_of: Callable[[Any], tuple], *,
            workers: int, on_done: Callable[[Any, Any], None],
            describe: Callable[[Any], str] = str) -> None:
  """Calls fn(*args_of(job)) for every job, `workers` at a time (1: in this process), and
  on_done(job, result) here as each finishes. A job that raises cancels the rest and
  raises RuntimeError naming it.

  Args:
    jobs: the jobs.
    fn: the function a job runs.
    args_of: job -> fn's arguments.
    workers: processes.
    on_done: job, result -> None.
    describe: job -> text for messages.
  Returns:
    None.
  """
  run_when_ready(jobs, fn, args_of, workers=workers, on_done=on_done,
                 ready=lambda _: True, describe=describe)


def run_when_ready(jobs: Iterable[Any], fn: Callable, args_of: Callable[[Any], tuple], *,
                   workers: int, on_done: Callable[[Any, Any], None],
                   ready: Callable[[Any], bool], describe: Callable[[Any], str] = str) -> None:
  """run_all for jobs that depend on others: a job starts, in list order, once
  `ready(job)` is true (asked again as each job finishes) and a worker is free.

  Args:
    jobs, fn, args_of, workers, on_done, describe: as run_all's.
    ready: job -> whether it may start.
  Returns:
    None.
  """
  pending = list(jobs)
  run_growing(lambda: [j for j in pending if ready(j)], fn, args_of, workers=workers,
              on_done=on_done, on_start=pending.remove, describe=describe)
  if pending:
    raise RuntimeError(f'no job can start: {", ".join(describe(j) for j in pending)} '
                       'wait for jobs that are not in the list')


def run_growing(next_jobs: Callable[[], list], fn: Callable, args_of: Callable[[Any], tuple],
                *, workers: int, on_done: Callable[[Any, Any], None],
                on_start: Callable[[Any], None] = lambda job: None,
                describe: Callable[[Any], str] = str) -> None:
  """Runs the jobs of a plan that grows as results come in: whenever a worker is free,
  next_jobs() lists the jobs that may start now, in priority order (finished ones left out
  by the caller; running ones are skipped here). Returns when nothing runs and next_jobs()
  offers nothing new. on_start(job) and on_done(job, result) are called here. A job that
  raises cancels the rest and raises RuntimeError naming it.

  Args:
    next_jobs: () -> the jobs that may start now.
    fn, args_of, workers, on_done, describe: as run_all's.
    on_start: job -> None.
  Returns:
    None.
  """
  running_jobs = []

  def pick():
    return next((j for j in next_jobs() if j not in running_jobs), None)

  if max(1, int(workers)) == 1:
    while (job := pick()) is not None:
      interrupts.check(KEPT)
      on_start(job)
      on_done(job, fn(*args_of(job)))
    return
  ctx = multiprocessing.get_context('spawn')
  counter = ctx.Value('i', 0)
  cache = jax.config.jax_compilation_cache_dir or ''
  with concurrent.futures.ProcessPoolExecutor(int(workers), mp_context=ctx,
                                              initializer=init_worker,
                                              initargs=(counter, cache, _verbosity(),
                                                        os.getpid())) as pool:
    running = {}
    forwarded = False
    while True:
      while (len(running) < int(workers) and not interrupts.requested()
             and (job := pick()) is not None):
        on_start(job)
        running_jobs.append(job)
        running[pool.submit(call_if_parent_alive, fn, *args_of(job))] = job
      if not running:
        break
      finished, _ = concurrent.futures.wait(running, timeout=1.0,
                                            return_when='FIRST_COMPLETED')
      if interrupts.requested() and not forwarded:
        # A Ctrl-C at a terminal reaches the workers too; `kill -INT` of this process
        # alone does not: pass it on, so that the running jobs save and stop.
        _forward(interrupts.requested())
        forwarded = True
      for future in finished:
        job = running.pop(future)
        running_jobs.remove(job)
        try:
          result = future.result()
        except Exception as e:
          if interrupts.requested():
            continue  # Stopped by the signal; the job saved what it keeps.
          for f in running:
            f.cancel()
          raise RuntimeError(f'{describe(job)} failed: {e}') from e
        on_done(job, result)
  interrupts.check(KEPT)


def _forward(signum: int) -> None:
  for child in multiprocessing.active_children():
    try:
      os.kill(child.pid, signum)
    except ProcessLookupError:
      pass
