r"""Training-step benchmarks: every attention variant, Hugging Face's BERT, the device's peak.

  python -m sharedbert.lab.bench --hf_python=/path/to/venv/bin/python    # CPU preset
  python -m sharedbert.lab.bench --preset=gpu                              # bench/gpu_check.sh

For each size and attention variant, the jitted training step of `sharedbert.train` (built
by `create_train_state`, `make_optimizer` and `jit_steps`, as `train_and_evaluate` builds
it) is compiled once; then, in `--rounds` rounds in which every variant and the peer take
turns, it runs `--warmup` untimed and `--steps` timed steps; the median over all timed steps
is reported with tokens/s, the FLOP/s of the matrix products it runs
(`sharedbert.models.flops`), the MFU against the device's peak, XLA's memory for the step and the compile time. In the same
run and on the same batch, Hugging Face's `BertForMaskedLM` (PyTorch; `pip install -e
".[bench]"`) trains at the same size, batch, sequence length and optimizer, in a separate
process (`sharedbert/lab/bench/hf_peer.py`, run by `--hf_python`), so that the two never share the
CPU. The peak is a large matrix product timed in this process at the start and at the end
of the run (the higher one counts); on GPUs and TPUs the datasheet figure is reported too.

Also measured: the largest BERT-base batch whose step fits in memory (compile only, from
XLA's memory analysis; with and without rematerialisation) and the input pipeline's
batches/s. Results go to a JSON file and to BENCHMARKS.md, between the markers
`<!-- bench:begin -->` and `<!-- bench:end -->` (text outside them is kept).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from absl import app
from absl import flags
from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from sharedbert import config as config_lib
from sharedbert.models import flops as flops_lib
from sharedbert.utils import paths
from sharedbert import sharding
from sharedbert import pretrain_step
from sharedbert.data.pretrain import InMemoryData, prefetch
from sharedbert.data.tokenizer import CLS_ID, NUM_SPECIAL
from sharedbert.config import validation
from sharedbert.errors import UserError, one_line_errors
from sharedbert.models import attention as attention_lib
from sharedbert.models.bert import ModelConfig
from sharedbert.lab.bench.sizes import (BERT_BASE, GIB, SIZES, Size, bench_config, memory_bytes,
                                    step_parts, synthetic_batch)
from sharedbert import cli
from sharedbert.lab.bench.memory import largest_fitting_batch, memory_budget_bytes, step_memory_fn
from sharedbert.lab.bench.report import read_markdown, render_markdown, write_markdown


# (size, what is compared, threshold); the ratios come from one run. Issue 18's targets, and
# issue 7's for the input pipeline (issue 7's others, 1.8x and 1.5x Hugging Face and shared
# 1.25x standard at base width, were restated by issue 18).
CPU_TARGETS = (
    ('small', 'standard / Hugging Face tokens/s', 1.35),
    ('small', 'shared / standard tokens/s', 1.10),
    ('base_width', 'shared / standard tokens/s', 1.15),
    ('base_width', 'standard MFU', 0.70),
    ('small', 'input pipeline / training step rate', 3.0),
)
GPU_TARGETS = (('gpu_base', 'standard MFU', 0.50),)

PRESETS = {
    'cpu': dict(sizes='small,base_width', variants='', steps=4, warmup=2, rounds=3, peak_n=2048,
                peak_dtype='float32', memory_seq_lens='128,512', pipeline_size='small',
                targets=CPU_TARGETS),
    'gpu': dict(sizes='gpu_base', variants='standard,shared', steps=10, warmup=3, rounds=1,
                peak_n=8192,
                peak_dtype='bfloat16', memory_seq_lens='', pipeline_size='',
                targets=GPU_TARGETS),
    'smoke': dict(sizes='smoke', variants='standard,shared', steps=2, warmup=1, rounds=1,
                  peak_n=256,
                  peak_dtype='float32', memory_seq_lens='', pipeline_size='smoke', targets=()),
}

# Dense bfloat16 peak FLOP/s from the vendors' datasheets, by jax's device_kind.
DATASHEET_PEAK = {
    'NVIDIA H100 80GB HBM3': 989.4e12,   # H100 SXM.
    'NVIDIA H100 PCIe': 756.5e12,
    'NVIDIA H200': 989.4e12,
    'NVIDIA A100-SXM4-80GB': 312e12,
    'NVIDIA A100-SXM4-40GB': 312e12,
    'TPU v4': 275e12,
    'TPU v5 lite': 197e12,
    'TPU v5': 459e12,
    'TPU v6 lite': 918e12,
}


# ---------------------------------------------------------------------------------------
# The JAX side.


def _xla_flops(compiled, num_devices: int) -> float | None:
  """XLA's own FLOP count (elementwise work included) for the whole step; XLA reports it
  per device of an SPMD program."""
  try:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float(cost['flops']) * num_devices
  except Exception:  # Not every backend reports it.
    return None


class BenchStep:
  """sharedbert's training step for one size and variant, compiled once and timed on demand.

  `run` may be called several times (the rounds of `run_benchmarks`); the state carries on
  from call to call, as in training.
  """

  def __init__(self, size: Size, attention: str, batch: dict[str, np.ndarray] | None = None,
               positions: str = 'learned'):
    self.size, self.positions = size, positions
    # A row's name: the variant, marked when its positions are not the learned table.
    self.attention = attention if positions == 'learned' else f'{attention}+{positions}'
    self.variant = attention
    config = bench_config(size, attention, positions=positions)
    mesh, axis_rules, self.model_cfg, model, tx, schedule = step_parts(config)
    self.mesh, self.axis_rules = mesh, axis_rules
    init_rng, dropout_rng = jax.random.split(jax.random.key(config.seed))
    self.state, state_shardings = pretrain_step.create_train_state(
        model, tx, init_rng, mesh, axis_rules, size.seq_len, size.max_predictions)
    step_fn, _ = pretrain_step.jit_steps(model, tx, schedule, mesh, state_shardings, dropout_rng, 1)
    batch = synthetic_batch(size) if batch is None else batch
    with self._context():
      self.batch = sharding.global_batch(batch, mesh)
      t0 = time.perf_counter()
      self.lowered = step_fn.lower(self.state, self.batch)
      self.compiled = self.lowered.compile()
      self.compile_s = time.perf_counter() - t0
    self.times: list[float] = []
    self.loss = float('nan')

  @contextlib.contextmanager
  def _context(self):
    with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.axis_rules):
      yield

  def run(self, steps: int, warmup: int) -> list[float]:
    """`warmup` untimed steps, then `steps` timed ones (each to completion)."""
    with self._context():
      for _ in range(warmup):
        self.state, metrics = self.compiled(self.state, self.batch)
      jax.block_until_ready(self.state)
      times = []
      for _ in range(steps):
        t0 = time.perf_counter()
        self.state, metrics = self.compiled(self.state, self.batch)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - t0)
    self.loss = float(metrics['loss']) if steps or warmup else self.loss
    self.times += times
    return times

  def row(self) -> dict:
    """The figures of one table row, from every step timed so far."""
    size = self.size
    step_time = statistics.median(self.times)
    step_flops = flops_lib.train_step_flops(self.model_cfg, size.batch, size.seq_len,
                                            size.batch * size.max_predictions)
    return {
        'variant': self.attention,
        'attention': self.variant,
        'positions': self.positions,
        'step_time_s': step_time,
        'step_times_s': list(self.times),
        'tokens_per_s': size.batch * size.seq_len / step_time,
        'compile_s': self.compile_s,
        'flops_per_step': step_flops,
        'xla_flops_per_step': _xla_flops(self.compiled, self.mesh.size),
        'achieved_flops_per_s': step_flops / step_time,
        'memory_bytes': memory_bytes(self.compiled),
        'loss': self.loss,
    }


def time_train_step(size: Size, attention: str, *, steps: int, warmup: int,
                    batch: dict[str, np.ndarray] | None = None) -> dict:
  """Compiles and times sharedbert's training step once; returns one table row."""
  timer = BenchStep(size, attention, batch)
  timer.run(steps, warmup)
  row = timer.row()
  del timer
  gc.collect()
  return row


def measure_matmul_peak(n: int, dtype: str, reps: int = 5) -> float:
  """FLOP/s of one jitted [n, n] x [n, n] product (median of `reps` after a warm-up)."""
  x = jax.random.normal(jax.random.key(0), (n, n), jnp.dtype(dtype))
  product = jax.jit(lambda a, b: a @ b)
  product(x, x).block_until_ready()
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    product(x, x).block_until_ready()
    times.append(time.perf_counter() - t0)
  return 2 * n ** 3 / statistics.median(times)


# ---------------------------------------------------------------------------------------
# Memory: the largest batch that fits, from compiling only.


# ---------------------------------------------------------------------------------------
# The input pipeline alone.

def time_input_pipeline(size: Size, batches: int = 50, rows: int = 8192) -> dict:
  """Batches/s of `InMemoryData.batch` (masking included), alone and through `prefetch`
  with the host-to-device transfer, on random packed rows of `size`'s shape."""
  rng = np.random.default_rng(0)
  packed = rng.integers(NUM_SPECIAL, size.vocab_size, (rows, size.seq_len), dtype=np.int32)
  packed[:, 0] = CLS_ID
  data = InMemoryData(packed, global_batch=size.batch, process_index=0, process_count=1,
                      seed=0, shuffle=True,
                      masking=dict(mask_rate=0.15, max_predictions=size.max_predictions,
                                   vocab_size=size.vocab_size))
  data.batch(0)
  t0 = time.perf_counter()
  for step in range(batches):
    data.batch(step)
  alone = batches / (time.perf_counter() - t0)

  mesh = sharding.make_mesh(config_lib.pretrain_config('standard', 'size=small').mesh)
  stream = prefetch(data.batches())
  jax.block_until_ready(sharding.global_batch(next(stream), mesh))
  t0 = time.perf_counter()
  for _ in range(batches):
    jax.block_until_ready(sharding.global_batch(next(stream), mesh))
  fed = batches / (time.perf_counter() - t0)
  return {'batches_per_s': alone, 'prefetched_on_device_batches_per_s': fed,
          'batch': size.batch, 'seq_len': size.seq_len, 'batches_timed': batches}


# ---------------------------------------------------------------------------------------
# The Hugging Face peer, in its own process.

def default_hf_python() -> str:
  """This interpreter if it can import torch and transformers, else '' (no peer)."""
  if importlib.util.find_spec('torch') and importlib.util.find_spec('transformers'):
    return sys.executable
  return ''


def run_hf_peer(hf_python: str, size: Size, batch: dict[str, np.ndarray], *, steps: int,
                warmup: int, timeout_s: float = 1800) -> dict:
  """Times Hugging Face's BertForMaskedLM on `batch` in a subprocess; returns its figures."""
  config = bench_config(size, 'standard')
  model = {k: config.model[k] for k in (
      'vocab_size', 'hidden_size', 'num_layers', 'num_heads', 'mlp_dim', 'dropout_rate',
      'attention_dropout_rate', 'max_position_embeddings', 'type_vocab_size',
      'layer_norm_eps')}
  optim = {k: config.optim[k] for k in ('lr', 'b1', 'b2', 'eps', 'weight_decay',
                                        'grad_clip_norm', 'warmup_steps')}
  with tempfile.TemporaryDirectory() as tmp:
    npz = os.path.join(tmp, 'batch.npz')
    np.savez(npz, **batch)
    spec_path = os.path.join(tmp, 'spec.json')
    with open(spec_path, 'w') as f:
      json.dump({'model': model, 'optim': optim, 'batch_npz': npz, 'steps': steps,
                 'warmup': warmup, 'threads': os.cpu_count()}, f)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'hf_peer.py')
    try:
      done = subprocess.run([hf_python, script, spec_path], capture_output=True, text=True,
                            timeout=timeout_s)
    except FileNotFoundError as e:
      raise UserError(f'--hf_python={hf_python} does not exist; give a Python with torch and '
                      'transformers (pip install -e ".[bench]"), or --hf_python=none') from e
  if done.returncode:
    raise UserError(f'the Hugging Face peer failed under {hf_python} (exit {done.returncode}): '
                    f'{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""}; '
                    'it needs torch and transformers (pip install -e ".[bench]")')
  out = json.loads(done.stdout.strip().splitlines()[-1])
  step_time = out['step_time_s']
  every_position = flops_lib.train_step_flops(ModelConfig.from_config(config.model), size.batch,
                                              size.seq_len, size.batch * size.seq_len)
  out.update(variant='Hugging Face BertForMaskedLM', tokens_per_s=size.batch * size.seq_len /
             step_time, flops_per_step=every_position,
             achieved_flops_per_s=every_position / step_time)
  return out


# ---------------------------------------------------------------------------------------
# The whole run.

def machine_info() -> dict:
  cpu = platform.processor() or platform.machine()
  try:
    with open('/proc/cpuinfo') as f:
      names = [line.split(':', 1)[1].strip() for line in f if line.startswith('model name')]
    cpu = names[0] if names else cpu
  except OSError:
    pass
  device = jax.devices()[0]
  return {
      'cpu': cpu, 'cpu_cores': os.cpu_count(),
      'ram_gib': os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / GIB,
      'platform': platform.platform(), 'python': platform.python_version(),
      'jax': jax.__version__, 'backend': device.platform, 'device_kind': device.device_kind,
      'devices': jax.device_count(),
  }


def benchmarkable_variants(names: str) -> list[str]:
  """The requested variants, or every registered one that sharedbert.models.flops can count."""
  if names:
    chosen = [v.strip() for v in names.split(',') if v.strip()]
    unknown = [v for v in chosen if v not in attention_lib.VARIANTS]
    if unknown:
      raise UserError(f'--variants: unknown attention variant(s) {unknown}; choose from '
                      f'{", ".join(sorted(attention_lib.VARIANTS))}')
    return chosen
  out = []
  for name in attention_lib.VARIANTS:
    try:
      flops_lib.forward_flops(ModelConfig(attention=name, num_layers=1), 1, 1, 1)
      out.append(name)
    except UserError:
      logging.warning('bench: no FLOP count for the variant %r; left out', name)
  order = ['standard', 'shared']
  return sorted(out, key=lambda v: (order.index(v) if v in order else len(order), v))


def _load() -> list[float]:
  try:
    return [round(x, 2) for x in os.getloadavg()]
  except OSError:
    return []


def run_benchmarks(*, preset: str, sizes: list[str], variants: list[str], steps: int,
                   warmup: int, rounds: int, hf_python: str, peak_n: int, peak_dtype: str,
                   memory_seq_lens: list[int], pipeline_size: str, targets=(),
                   command: str = '', positions: tuple[str, ...] = ('learned',)) -> dict:
  """Every (size, variant, positions) step timed in interleaved rounds, the peer beside
  them; then the peak, memory and input pipeline. Returns the results dict."""
  results: dict[str, Any] = {
      'command': command, 'preset': preset, 'machine': machine_info(),
      'started': time.strftime('%Y-%m-%d %H:%M:%S %Z'), 'load_average_start': _load(),
      'steps': steps, 'warmup': warmup, 'rounds': rounds, 'sizes': {},
  }
  logging.info('bench: peak of a %dx%d %s matrix product', peak_n, peak_n, peak_dtype)
  peak_start = measure_matmul_peak(peak_n, peak_dtype)
  for name in sizes:
    size = SIZES[name]
    batch = synthetic_batch(size)
    entry = {'size': dataclasses.asdict(size), 'description': size.text(), 'rows': []}
    results['sizes'][name] = entry
    timers = []
    for variant in variants:
      for where in positions:  # Side by side: each variant's positions in the same rounds.
        logging.info('bench: %s, %s: compiling', name,
                     variant if where == 'learned' else f'{variant}+{where}')
        timers.append(BenchStep(size, variant, batch, positions=where))
    # Rounds: every variant and the peer in turn, `rounds` times over. This machine's speed
    # drifts over tens of seconds; interleaving puts that drift into every configuration
    # alike instead of into the ratios between them.
    hf_runs = []
    for r in range(rounds):
      for i, timer in enumerate(timers):
        times = timer.run(steps, warmup if r == 0 else 1)
        logging.info('bench: %s %s, round %d/%d: median %.3f s/step', name, timer.attention,
                     r + 1, rounds, statistics.median(times))
        if i == 0 and hf_python:
          hf_runs.append(_hf_run(hf_python, size, batch, steps, warmup))
    entry['rows'] = [timer.row() for timer in timers]
    entry['hf'] = (_merge_hf_runs(size, hf_runs) if hf_runs else
                   {'skipped': 'no Python with torch and transformers (--hf_python)'})
    del timers
    gc.collect()
  peak_end = measure_matmul_peak(peak_n, peak_dtype)
  device_kind = jax.devices()[0].device_kind
  results['peak'] = {
      'matmul_n': peak_n, 'dtype': peak_dtype, 'measured_start_flops_per_s': peak_start,
      'measured_end_flops_per_s': peak_end, 'measured_flops_per_s': max(peak_start, peak_end),
      'datasheet_flops_per_s': DATASHEET_PEAK.get(device_kind), 'device_kind': device_kind,
  }
  peak = results['peak']['datasheet_flops_per_s'] or results['peak']['measured_flops_per_s']
  results['peak']['mfu_denominator'] = ('datasheet' if results['peak']['datasheet_flops_per_s']
                                        else 'measured')
  for entry in results['sizes'].values():
    for row in entry['rows'] + ([entry['hf']] if 'tokens_per_s' in entry.get('hf', {}) else []):
      row['mfu'] = flops_lib.mfu(row['flops_per_step'], row['step_time_s'], peak)
      row['mfu_vs_measured_peak'] = flops_lib.mfu(
          row['flops_per_step'], row['step_time_s'], results['peak']['measured_flops_per_s'])

  if memory_seq_lens:
    budget, budget_text = memory_budget_bytes()
    results['memory'] = {'budget_bytes': budget, 'budget': budget_text, 'rows': []}
    for seq_len in memory_seq_lens:
      for remat in ('none', 'full'):
        logging.info('bench: largest BERT-base batch at sequence %d, remat=%s', seq_len, remat)
        size = Size(**BERT_BASE, batch=8, seq_len=seq_len,
                    max_predictions=max(1, round(0.15 * seq_len)) if seq_len > 128 else 20)
        found = largest_fitting_batch(step_memory_fn(size, 'standard', remat), budget)
        results['memory']['rows'].append({'seq_len': seq_len, 'remat': remat, **found})
        gc.collect()

  if pipeline_size:
    size = SIZES[pipeline_size]
    results['pipeline'] = time_input_pipeline(size)
    step_rows = [r for r in results['sizes'].get(pipeline_size, {}).get('rows', [])]
    if step_rows:
      steps_per_s = 1.0 / step_rows[0]['step_time_s']
      results['pipeline'].update(
          train_steps_per_s=steps_per_s, train_variant=step_rows[0]['variant'],
          ratio=results['pipeline']['prefetched_on_device_batches_per_s'] / steps_per_s)

  results['targets'] = check_targets(results, targets)
  results['load_average_end'] = _load()
  results['finished'] = time.strftime('%Y-%m-%d %H:%M:%S %Z')
  return results


def _hf_run(hf_python, size, batch, steps, warmup) -> dict:
  logging.info('bench: Hugging Face BertForMaskedLM under %s', hf_python)
  out = run_hf_peer(hf_python, size, batch, steps=steps, warmup=warmup)
  logging.info('bench: Hugging Face: median %.3f s/step', out['step_time_s'])
  return out


def _merge_hf_runs(size: Size, runs: list[dict]) -> dict:
  """One row from the peer's rounds: the median over all their timed steps."""
  out = dict(runs[0])
  out['step_times_s'] = [t for run in runs for t in run['step_times_s']]
  out['step_time_s'] = statistics.median(out['step_times_s'])
  out['peak_rss_bytes'] = max(run['peak_rss_bytes'] for run in runs)
  out['tokens_per_s'] = size.batch * size.seq_len / out['step_time_s']
  out['achieved_flops_per_s'] = out['flops_per_step'] / out['step_time_s']
  return out


def _row(entry, variant):
  return next((r for r in entry.get('rows', []) if r['variant'] == variant), None)


def check_targets(results: dict, targets) -> list[dict]:
  out = []
  for size_name, what, threshold in targets:
    entry = results['sizes'].get(size_name, {})
    value = None
    if what == 'standard / Hugging Face tokens/s':
      std, hf = _row(entry, 'standard'), entry.get('hf', {})
      if std and 'tokens_per_s' in hf:
        value = std['tokens_per_s'] / hf['tokens_per_s']
    elif what == 'shared / standard tokens/s':
      std, shared = _row(entry, 'standard'), _row(entry, 'shared')
      if std and shared:
        value = shared['tokens_per_s'] / std['tokens_per_s']
    elif what == 'standard MFU':
      std = _row(entry, 'standard')
      value = std['mfu'] if std else None
    elif what == 'input pipeline / training step rate':
      value = results.get('pipeline', {}).get('ratio')
    out.append({'size': size_name, 'target': what, 'threshold': threshold, 'value': value,
                'met': None if value is None else bool(value >= threshold)})
  return out


# ---------------------------------------------------------------------------------------
# Reports.


# ---------------------------------------------------------------------------------------
# Command line.

FLAGS = flags.FLAGS
flags.DEFINE_enum('preset', 'cpu', sorted(PRESETS), 'Sizes, variants and checks to run.')
flags.DEFINE_string('sizes', None, f'Comma-separated sizes (of {", ".join(SIZES)}); default: '
                    'the preset\'s.')
flags.DEFINE_string('variants', None, 'Comma-separated attention variants; default: the '
                    'preset\'s (cpu: every registered variant).')
flags.DEFINE_integer('steps', None, 'Timed steps per configuration and round.')
flags.DEFINE_integer('rounds', None, 'Rounds over all configurations, interleaved; the median '
                     'is over every timed step of every round.')
flags.DEFINE_integer('warmup', None, 'Untimed steps after compiling.')
flags.DEFINE_list('positions', ['learned'], 'model.position_embeddings of each timed '
                  'variant: "learned,rotary" times both, side by side in the same rounds (rows '
                  'VARIANT and VARIANT+rotary, and their ratio).')
flags.DEFINE_string('hf_python', '', 'Python with torch and transformers for the Hugging Face '
                    'peer; default: this one if it can import them; "none" skips the peer.')
flags.DEFINE_string('memory_seq_lens', None, 'Sequence lengths of the largest-batch search '
                    '("" skips it).')
flags.DEFINE_string('pipeline_size', None, 'Size whose input pipeline is timed ("" skips it).')
flags.DEFINE_string('out_json', 'benchmarks.json', 'Where the results go as JSON.')
flags.DEFINE_string('out_md', 'BENCHMARKS.md', 'Markdown file whose bench section is '
                    'rewritten ("" writes none).')


def _positions(values: list[str]) -> list[str]:
  allowed = ('learned', 'rotary', 'none')
  bad = [v for v in values if v not in allowed]
  if bad or not values:
    raise UserError(f'--positions: {bad or "nothing"}; choose among {", ".join(allowed)}')
  return list(dict.fromkeys(values))


def _csv(text: str) -> list[str]:
  return [x.strip() for x in text.split(',') if x.strip()]


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  preset = PRESETS[FLAGS.preset]
  pick = lambda name: preset[name] if getattr(FLAGS, name) is None else getattr(FLAGS, name)
  sizes = _csv(pick('sizes'))
  for s in sizes:
    if s not in SIZES:
      raise UserError(f'--sizes: unknown size {s!r}; choose from {", ".join(SIZES)}')
  for name in ('steps', 'rounds'):
    if pick(name) < 1:
      raise UserError(f'--{name} must be at least 1, not {pick(name)}')
  if pick('warmup') < 0:
    raise UserError(f'--warmup must be at least 0, not {pick("warmup")}')
  for flag in ('out_json', 'out_md'):  # Where the results go: writable, before any timing.
    if getattr(FLAGS, flag):
      validation.output_file(getattr(FLAGS, flag), f'--{flag}')
  if FLAGS.out_md:
    read_markdown(FLAGS.out_md)  # Decodes, or one line now rather than after the run.
  hf_python = FLAGS.hf_python or default_hf_python()
  if hf_python.lower() == 'none':
    hf_python = ''
  # Absolute paths (a venv's python) become relative: the JSON and BENCHMARKS.md are committed.
  command = 'python -m sharedbert.lab.bench ' + paths.display_command(sys.argv[1:])
  results = run_benchmarks(
      preset=FLAGS.preset, sizes=sizes, variants=benchmarkable_variants(pick('variants')),
      steps=pick('steps'), warmup=pick('warmup'), rounds=pick('rounds'), hf_python=hf_python,
      peak_n=preset['peak_n'], peak_dtype=preset['peak_dtype'],
      memory_seq_lens=[int(x) for x in _csv(pick('memory_seq_lens'))],
      pipeline_size=pick('pipeline_size'), targets=preset['targets'], command=command.strip(),
      positions=tuple(_positions(FLAGS.positions)))
  with open(FLAGS.out_json, 'w') as f:
    json.dump(results, f, indent=1)
  body = render_markdown(results)
  if FLAGS.out_md:
    write_markdown(FLAGS.out_md, body)
  print(body)


def entry():
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  with one_line_errors('sharedbert bench'):
    app.run(main, flags_parser=cli.flags_parser('sharedbert bench', 'sharedbert.lab.bench'))


if __name__ == '__main__':
  entry()
