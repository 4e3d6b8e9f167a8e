"""Where a training step's time goes: op times from a jax.profiler trace, by part of the model.

    python tools/profile_step.py --size=small --variant=shared [--traced_steps=3] [--out=/tmp/prof]

Builds the benchmark's step (`sharedbert.lab.bench.run.BenchStep`: the same compiled training step
as `python -m sharedbert.lab.bench`), times a few steps, traces `--traced_steps` more with the Python
tracer off, and sums each XLA op's time from the trace (Perfetto JSON). Each op is attributed
through the `op_name` metadata of the compiled HLO to a part of the model (attention, FFN,
LayerNorms, MLM head, optimizer) and to the forward or backward pass, and split into matrix
products (YNNPACK fusions and dots) and everything else. Also printed: the time in which no
op runs, and the ops' total time over the wall time (how much XLA:CPU overlapped them).
BENCHMARKS.md ("What the profile shows") was read off this output.

On a GPU the trace holds the device's kernels as well: then the kernel time per step is
printed by kind (matrix products, attention, everything else), with the slowest kernels and
how much of the step the GPU was busy (idle gaps mean the host or launches hold it back).
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re
import statistics
import sys

# Run as a script from a checkout that is not pip-installed (a bare GPU machine): the
# repository root, not tools/, must be on the path.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import jax  # noqa: E402

from sharedbert.lab.bench.run import BenchStep  # noqa: E402
from sharedbert.lab.bench.sizes import SIZES  # noqa: E402

flags.DEFINE_string('size', 'small', 'A size of sharedbert.lab.bench.sizes.SIZES.')
flags.DEFINE_string('variant', 'standard', 'Attention variant.')
flags.DEFINE_integer('traced_steps', 3, 'Traced steps.')
flags.DEFINE_string('out', '/tmp/profile_step', 'Where the trace goes.')
flags.DEFINE_integer('top', 15, 'How many of the slowest non-product ops to list.')
FLAGS = flags.FLAGS

# Runtime bookkeeping events, not ops.
_NOT_OPS = ('ThunkExecutor', 'SlinkyThreadPool', 'ThreadpoolListener', 'PjitFunction',
            'CommonPjRt', 'ParseArguments', 'Handle inputs', 'np.asarray')


def _part(op_name: str) -> str:
  if not op_name:
    return 'unattributed'
  path = re.sub(r'layer_\d+', 'layer_N', op_name)
  if 'jvp(' not in path:  # Outside the model's forward and backward pass.
    return 'optimizer'
  for key, part in (('attention_norm', 'layernorm'), ('output_norm', 'layernorm'),
                    ('LayerNorm', 'layernorm'), ('final_norm', 'layernorm'),
                    ('/attention', 'attention'), ('/mlp', 'ffn'), ('mlm', 'mlm head'),
                    ('attend', 'mlm head'), ('embeddings', 'embeddings')):
    if key in path:
      return part
  return 'other'


def _op_names(hlo: str) -> dict[str, str]:
  """Each HLO instruction's name -> its op_name metadata (the model path it came from)."""
  return dict(re.findall(r'\n\s*%?([\w.\-]+) = [^\n]*?op_name="([^"]*)"', hlo))


def _direction(op_name: str) -> str:
  return 'backward' if 'transpose(jvp' in op_name else 'forward'


def _trace_events(trace_dir: str) -> list:
  """The events of the newest run's trace (run folders are named by time; --out may be reused)."""
  path = sorted(glob.glob(f'{trace_dir}/**/perfetto_trace.json.gz', recursive=True))[-1]
  with gzip.open(path) as f:
    data = json.load(f)
  return data['traceEvents'] if isinstance(data, dict) else data


def _span_and_busy(events: list, steps: int) -> tuple[float, float]:
  """ms per step: from the first event's start to the last one's end, and the time in
  which at least one event runs (a sweep over their intervals)."""
  edges = sorted([(e['ts'], 1) for e in events] + [(e['ts'] + e['dur'], -1) for e in events])
  busy, running, last = 0.0, 0, edges[0][0]
  for t, delta in edges:
    if running > 0:
      busy += t - last
    running += delta
    last = t
  return (edges[-1][0] - edges[0][0]) / 1e3 / steps, busy / 1e3 / steps


def summarise(trace_dir: str, hlo: str, steps: int) -> None:
  events = _trace_events(trace_dir)
  ops = [e for e in events if e.get('ph') == 'X' and 'dur' in e
         and not e['name'].startswith(_NOT_OPS)]
  op_time = collections.Counter()
  for e in ops:
    op_time[e['name']] += e['dur'] / 1e3 / steps  # ms per step
  names = _op_names(hlo)
  table = collections.Counter()
  for name, ms in op_time.items():
    kind = 'products' if name.startswith(('ynn_fusion', 'dot')) else 'other ops'
    op_name = names.get(name, '')
    table[(_part(op_name), _direction(op_name), kind)] += ms
  _print_parts(table, ('products', 'other ops'))
  span, busy = _span_and_busy(ops, steps)
  print(f'span {span:.0f} ms/step, no op running {span - busy:.0f} ms/step, '
        f'ops overlap {sum(op_time.values()) / span:.2f}x')
  print(f'slowest {FLAGS.top} ops outside the products (ms/step, op, model path):')
  others = [(ms, n) for n, ms in op_time.items() if not n.startswith(('ynn_fusion', 'dot'))]
  for ms, name in sorted(others, reverse=True)[:FLAGS.top]:
    print(f'  {ms:6.1f} {name:32s} {names.get(name, "")[-90:]}')


def _print_parts(table: collections.Counter, kinds) -> None:
  """ms per step by (part of the model, pass, kind), then each kind's total."""
  print(f'{"part":12s} {"pass":9s} {"kind":18s} ms/step')
  for key in sorted(table):
    print(f'{key[0]:12s} {key[1]:9s} {key[2]:18s} {table[key]:7.2f}')
  for kind in kinds:
    print(f'total {kind}: {sum(v for k, v in table.items() if k[2] == kind):.2f} ms/step')


def _kernel_op_name(kernel: dict, names: dict[str, str]) -> str:
  """The model path of a GPU kernel: XLA names a fusion's kernel after its HLO instruction
  with '_N' for '.N' (input_reduce_fusion_9 <- %input_reduce_fusion.9). Library kernels
  (cuBLAS, cuDNN) carry their own names; the trace's hlo_op argument, where there is one,
  names their instruction."""
  name = kernel['name']
  hlo_op = kernel.get('args', {}).get('hlo_op', '')
  for candidate in (hlo_op, name, re.sub(r'_(\d+)$', r'.\1', name)):
    if candidate in names:
      return names[candidate]
  return ''


def _kernel_kind(name: str) -> str:
  low = name.lower()
  if any(k in low for k in ('flash', 'fmha', 'cudnn', 'attention')):
    return 'attention kernels'
  if any(k in low for k in ('gemm', 'cutlass', 'cublas', 'sm90_xmma', 'nvjet', 'matmul',
                            'triton_gemm', 'dot')):
    return 'matrix products'
  return 'other kernels'


def summarise_device(trace_dir: str, hlo: str, steps: int, top: int) -> None:
  """Kernel time per step on the accelerator's streams (processes named like /device:GPU:0),
  by kind and by part of the model, and the slowest kernels with the model path of each."""
  events = _trace_events(trace_dir)
  names = {e['pid']: e.get('args', {}).get('name', '') for e in events
           if e.get('ph') == 'M' and e.get('name') == 'process_name'}
  print('processes: ' + '; '.join(f'{pid}={n}' for pid, n in sorted(names.items())))
  device_pids = {pid for pid, n in names.items() if 'GPU' in n or 'TPU' in n}
  kernels = [e for e in events if e.get('ph') == 'X' and 'dur' in e and e['pid'] in device_pids]
  if not kernels:
    print('no device events in the trace (is the profiler plugin for this backend there?)')
    return
  names = _op_names(hlo)
  by_name, by_kind, table = collections.Counter(), collections.Counter(), collections.Counter()
  path_of = {}
  for e in kernels:
    ms = e['dur'] / 1e3 / steps
    kind = _kernel_kind(e['name'])
    op_name = _kernel_op_name(e, names)
    path_of.setdefault(e['name'], op_name)
    by_name[e['name']] += ms
    by_kind[kind] += ms
    table[(_part(op_name), _direction(op_name), kind)] += ms
  for kind, ms in by_kind.most_common():
    print(f'{kind:18s} {ms:8.2f} ms/step')
  _print_parts(table, ())
  span, busy = _span_and_busy(kernels, steps)
  print(f'span {span:.1f} ms/step, a kernel running {busy:.1f} ms/step, '
        f'{len(kernels) / steps:.0f} kernels/step')
  print(f'slowest {top} kernels (ms/step, calls/step, name, model path):')
  calls = collections.Counter(e['name'] for e in kernels)
  for name, ms in by_name.most_common(top):
    path = re.sub(r'^jit\([^)]*\)/', '', path_of[name])
    print(f'  {ms:7.2f} {calls[name] / steps:5.0f}  {name[:48]:48s} {path[-80:]}')


def main(argv):
  del argv
  timer = BenchStep(SIZES[FLAGS.size], FLAGS.variant)
  timer.run(3, 2)
  print(f'{FLAGS.size} {FLAGS.variant}: median step {statistics.median(timer.times) * 1e3:.0f} '
        'ms untraced')
  options = jax.profiler.ProfileOptions()
  options.python_tracer_level = 0
  with jax.profiler.trace(FLAGS.out, create_perfetto_trace=True, profiler_options=options):
    timer.run(FLAGS.traced_steps, 0)
  if jax.devices()[0].platform == 'cpu':
    summarise(FLAGS.out, timer.compiled.as_text(), FLAGS.traced_steps)
  else:
    summarise_device(FLAGS.out, timer.compiled.as_text(), FLAGS.traced_steps, FLAGS.top)


if __name__ == '__main__':
  app.run(main)
