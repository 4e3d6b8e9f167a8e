r"""Compile time of the BERT-base training step, layers unrolled against scanned.

  python tools/compile_time.py [--attention=standard] [--remat=none] [--batch=32]

Compiles only (abstract state and batch: nothing is allocated, nothing is trained), each
layout once in its own process so that neither warms the other's caches, and prints one
Markdown row per layout with the machine's core count and load (BENCHMARKS.md).
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(attention: str, scan_layers: bool, remat: str, batch: int) -> dict:
  """One layout, in this process."""
  from sharedbert.lab.bench import memory as bench_memory
  from sharedbert.lab.bench import sizes as bench_sizes
  size = bench_sizes.Size(**bench_sizes.BERT_BASE, batch=batch)
  return bench_memory.step_compile_seconds(size, attention, scan_layers=scan_layers, remat=remat)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--attention', default='standard')
  parser.add_argument('--remat', default='none', choices=('none', 'full', 'dots'))
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--one', choices=('unrolled', 'scanned'), help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.one:
    row = measure(args.attention, args.one == 'scanned', args.remat, args.batch)
    print(json.dumps(row))
    return
  rows = []
  for layout in ('unrolled', 'scanned'):
    done = subprocess.run([sys.executable, __file__, f'--one={layout}',
                           f'--attention={args.attention}', f'--remat={args.remat}',
                           f'--batch={args.batch}'], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), check=True)
    rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
  load = ', '.join(f'{x:.2f}' for x in os.getloadavg())
  print(f'BERT-base {args.attention}, remat={args.remat}, batch {args.batch} x 128; '
        f'{os.cpu_count()} cores, load average {load} (at the end)')
  print('| layers | lower (s) | compile (s) | XLA memory (GiB) |')
  print('|---|---|---|---|')
  for r in rows:
    mem = r['memory_bytes'] / (1 << 30) if r['memory_bytes'] else float('nan')
    print(f'| {"scanned" if r["scan_layers"] else "unrolled"} | {r["lower_s"]:.1f} | '
          f'{r["compile_s"]:.1f} | {mem:.2f} |')


if __name__ == '__main__':
  main()
