r"""Replays the faults of issues 44 and 56 as a user meets them and prints a table of what
happened.

  python tools/replay_faults.py [--out=faults.md] [--keep=DIR]

Each case is a real command in a scratch folder (a tiny `standard` pretraining run made
first, from the embedded default corpus): its exit code, how many stderr lines are not log records
(absl's `I…`/`W…` lines), the last such line, and whether that is what the issue asks for
(exit code, one line, nothing written). Needs no data folder and no network; about 10
minutes on 2 cores (measured with one other job beside it). The unit tests check each behaviour; this is the user's-eye replay.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable, Optional

REPO = pathlib.Path(__file__).resolve().parents[1]
ENV = dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=str(REPO))
LOG_RECORD = re.compile(r'^[IWEF]\d{4} ')  # absl's log lines.
TINY = [f'--config={REPO}/configs/standard_base.py:tiny', '--config.log_every_steps=2',
        '--config.eval_every_steps=10', '--config.ckpt.every_steps=5',
        '--config.ckpt.async_save=false']


@dataclasses.dataclass
class Result:
  code: int
  stderr: str

  @property
  def not_logs(self) -> list[str]:
    return [l for l in self.stderr.splitlines() if l.strip() and not LOG_RECORD.match(l)
            and not l.startswith('INFO:absl:')]


@dataclasses.dataclass
class Case:
  name: str
  command: list[str]
  expect_code: int
  check: Optional[Callable[[Result], bool]] = None  # More than the code and one line.
  signal_after: Optional[str] = None  # Send `signum` once this text is on stderr.
  one_line: bool = True
  signum: int = signal.SIGINT


def sharedbert(*args) -> list[str]:
  return [sys.executable, '-c', 'import sys; from sharedbert.cli import command; '
          'sys.exit(command())', *args]


def run(cmd: list[str], cwd, signal_after: Optional[str] = None, timeout=600,
        signum: int = signal.SIGINT) -> Result:
  with tempfile.TemporaryFile('w+') as err:
    proc = subprocess.Popen(cmd, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=err,
                            text=True)
    if signal_after is not None:
      deadline = time.time() + timeout
      while proc.poll() is None and time.time() < deadline:
        err.seek(0)
        if signal_after in err.read():
          proc.send_signal(signum)
          break
        time.sleep(0.05)
    code = proc.wait(timeout=timeout)
    err.seek(0)
    return Result(code, err.read())


def flip_bytes(path: pathlib.Path, offset: int = 64, count: int = 4096):
  data = bytearray(path.read_bytes())
  end = min(len(data), offset + count)
  for i in range(offset, end):
    data[i] ^= 0xFF
  path.write_bytes(bytes(data))


def largest_file(folder: pathlib.Path) -> pathlib.Path:
  return max((p for p in folder.rglob('*') if p.is_file()), key=lambda p: p.stat().st_size)


def train_tiny(workdir, *flags) -> Callable[[], None]:
  """A case's setup: a tiny run of 2 steps in `workdir`, with `flags`."""
  return lambda: subprocess.run(sharedbert('run', *TINY, '--config.total_steps=2', *flags,
                                           f'--workdir={workdir}'),
                                cwd=REPO, env=ENV, capture_output=True, check=True)


def _config(folder: pathlib.Path) -> dict:
  path = folder / 'config.json'
  return json.loads(path.read_text()) if path.is_file() else {}


def cases(root: pathlib.Path) -> list[tuple[Case, Callable[[], None]]]:
  """(case, its setup) for each fault; setups run just before their case."""
  base = root / 'base'
  out = []

  def copy(name):
    dest = root / name
    shutil.copytree(base, dest)
    return dest

  def add(case, setup=lambda: None):
    out.append((case, setup))

  # 1. A bit-flipped checkpoint: set aside, resumed from the newest that verifies.
  flipped = root / 'flipped'
  add(Case('bit-flipped latest checkpoint, resumed',
           sharedbert('run', *TINY, '--config.total_steps=15', f'--workdir={flipped}'), 0,
           check=lambda r: 'set aside' in r.stderr or 'damaged' in r.stderr, one_line=False),
      lambda: flip_bytes(largest_file(copy('flipped') / 'checkpoints' / '10' / 'state')))
  # 2. A causal model exported.
  causal = root / 'causal'
  add(Case('export of a causal model (custom code with its causal mask)', sharedbert(
      'convert_hf', 'export', f'--workdir={causal}', f'--hf_dir={root}/causal_hf'), 0,
      check=lambda r: _config(root / 'causal_hf').get('causal') is True, one_line=False),
      train_tiny(causal, '--config.model.causal=true'))
  # 3. Ctrl-C during training and during compilation.
  add(Case('Ctrl-C during pretraining', sharedbert(
      'run', *TINY, '--config.total_steps=400', f'--workdir={root}/ctrl_c'), 130,
      signal_after='[train] step 2:'))
  add(Case('Ctrl-C during compilation', sharedbert(
      'run', *TINY, '--config.total_steps=400', f'--workdir={root}/ctrl_c_compile'), 130,
      signal_after='Compiling the train step'))
  # 4. Relative paths and ~.
  add(Case('relative --workdir (pretraining)', sharedbert(
      'run', *TINY, '--config.total_steps=2', '--workdir=rel/run'), 0,
      check=lambda r: (root / 'rel' / 'run' / 'summary.json').exists(), one_line=False))
  # 5. Configs of the wrong kind.
  for sub, extra in (('params', []), ('probe', [f'--workdir={root}/p']),
                     ('study', [f'--workdir={root}/s']),
                     ('convert_hf', ['import', f'--hf_dir={root}/x', f'--workdir={root}/c'])):
    add(Case(f'{sub} --config=configs/glue.py:sst2',
             sharedbert(sub, *extra[:1], f'--config={REPO}/configs/glue.py:sst2', *extra[1:]), 2))
  # 6. A damaged vocab.model.
  add(Case('resume with an empty vocab.model', sharedbert(
      'run', *TINY, '--config.total_steps=15', f'--workdir={root}/vocab'), 2),
      lambda: (copy('vocab') / 'vocab.model').write_bytes(b''))
  add(Case('export with random bytes as vocab.model', sharedbert(
      'convert_hf', 'export', f'--workdir={root}/vocab2', f'--hf_dir={root}/vocab2_hf'), 2),
      lambda: (copy('vocab2') / 'vocab.model').write_bytes(os.urandom(4096)))
  # 7. Every checkpoint damaged.
  def damage_all():
    dest = copy('all_damaged')
    for step in (dest / 'checkpoints').iterdir():
      flip_bytes(largest_file(step / 'state'))
  add(Case('every checkpoint damaged', sharedbert(
      'run', *TINY, '--config.total_steps=15', f'--workdir={root}/all_damaged'), 2), damage_all)
  # 8. An oversized batch.
  add(Case('batch_size=262144', sharedbert(
      'run', *TINY, '--config.data.batch_size=262144', f'--workdir={root}/huge'), 2,
      check=lambda r: not (root / 'huge').exists()))
  # 9. Export of a model without position embeddings.
  nopos = root / 'nopos'
  add(Case('export without position embeddings (custom code without the table)', sharedbert(
      'convert_hf', 'export', f'--workdir={nopos}', f'--hf_dir={root}/nopos_hf'), 0,
      check=lambda r: _config(root / 'nopos_hf').get('position_embeddings') == 'none',
      one_line=False),
      train_tiny(nopos, '--config.model.position_embeddings=none'))
  # 10. bench onto a non-UTF-8 --out_md.
  add(Case('bench --out_md=<non-UTF-8 file>', sharedbert(
      'bench', f'--out_md={root}/bad.md', f'--out_json={root}/b.json'), 2,
      check=lambda r: not (root / 'b.json').exists()),
      lambda: (root / 'bad.md').write_bytes(b'\xff\xfe\x00bad'))
  # 11. uptrain of a GPT-2 folder.
  def gpt2():
    (root / 'gpt2').mkdir()
    (root / 'gpt2' / 'config.json').write_text('{"model_type": "gpt2", "n_embd": 64}')
    (root / 'data' / 'corpus').mkdir(parents=True)
    (root / 'data' / 'corpus' / 'text.txt').write_text('Some text to train on.\n' * 50)
    (root / 'data' / 'glue' / 'STS-B').mkdir(parents=True)
  add(Case('uptrain --encoder=<GPT-2 folder>', sharedbert(
      'uptrain', f'--encoder={root}/gpt2', f'--data={root}/data', f'--workdir={root}/up'), 2,
      check=lambda r: not (root / 'up').exists()), gpt2)
  # 12. Resume on another corpus.
  def other_corpus():
    copy('corpus')
    (root / 'other.txt').write_text('Another corpus entirely.\n\n' * 200)
  add(Case('resume on another corpus', sharedbert(
      'run', *TINY, '--config.total_steps=15', f'--config.data.corpus={root}/other.txt',
      f'--workdir={root}/corpus'), 2), other_corpus)
  # 13. A stale export temporary folder is removed by the next export.
  def stale():
    (root / 'exports' / '.out.tmp-999999-x').mkdir(parents=True)
  add(Case('export beside a stale .out.tmp-* folder (the next export removes it)', sharedbert(
      'convert_hf', 'export', f'--workdir={base}', f'--hf_dir={root}/exports/out'), 0,
      check=lambda r: not (root / 'exports' / '.out.tmp-999999-x').exists(), one_line=False),
      stale)
  _issue_56(root, base, add, copy)
  return out


def _write_sst2(folder: pathlib.Path, train_rows: int = 4000):
  """A glue_data folder with an SST-2 of short made-up sentences (no data folder needed)."""
  import random
  rng = random.Random(0)
  words = 'the a cat dog sat ran good bad film plot actor long short fine dull bright'.split()
  task = folder / 'SST-2'
  task.mkdir(parents=True, exist_ok=True)
  for name, n in (('train', train_rows), ('dev', 200)):
    with open(task / f'{name}.tsv', 'w') as f:
      f.write('sentence\tlabel\n')
      for i in range(n):
        f.write(' '.join(rng.choice(words) for _ in range(8)) + f'\t{i % 2}\n')


def _issue_56(root: pathlib.Path, base: pathlib.Path, add, copy):
  """Issue 56's cases: integrity, signals, causal pooling, the round trip, rotary, and a
  notebook mixing sharedbert and transformers."""
  # 14. A step count past int32.
  add(Case('--config.total_steps=3000000000', sharedbert(
      'run', *TINY, '--config.total_steps=3000000000', f'--workdir={root}/int32'), 2,
      check=lambda r: not (root / 'int32').exists()))
  # 15. A finished run rerun with a smaller total_steps writes nothing.
  noop = {}
  def noop_setup():
    dest = copy('noop')
    noop['before'] = (dest / 'config.json').read_bytes()
  add(Case('finished run rerun with --config.total_steps=5 (config.json untouched)', sharedbert(
      'run', *TINY, '--config.total_steps=5', f'--workdir={root}/noop'), 0,
      check=lambda r: (root / 'noop' / 'config.json').read_bytes() == noop['before'],
      one_line=False), noop_setup)
  # 16. The terminal closes during pretraining.
  add(Case('SIGHUP during pretraining (saves, exit 129, no tmp folder)', sharedbert(
      'run', *TINY, '--config.total_steps=400', f'--workdir={root}/hup'), 129,
      signal_after='[train] step 2:', signum=signal.SIGHUP,
      check=lambda r: not [p for p in (root / 'hup' / 'checkpoints').iterdir()
                           if 'tmp' in p.name]))
  # 17. SIGTERM in the middle of a GLUE epoch.
  glue_cmd = lambda workdir, init, *extra: sharedbert(
      'run', f'--config={REPO}/configs/glue.py:task=sst2,seeds=1', f'--config.init_from={init}',
      f'--config.data.glue_dir={root}/glue', f'--workdir={workdir}', *extra)
  add(Case('SIGTERM during a GLUE fine-tuning epoch', glue_cmd(
      root / 'ft_term', base, '--config.log_every_steps=5', '--config.num_epochs=3'), 143,
      signal_after='epoch 1: step 10/', signum=signal.SIGTERM),
      lambda: _write_sst2(root / 'glue'))
  # 18. A causal encoder fine-tuned with [CLS] pooling (causal: case 2's run).
  add(Case('GLUE init_from a causal model with [CLS] pooling', glue_cmd(
      root / 'ft_causal', root / 'causal'), 2, check=lambda r: not (root / 'ft_causal').exists()))
  # 19. sharedbert's own built-in export (pre-LN: RobertaPreLayerNorm, vocab.model) imported.
  add(Case('import of sharedbert\'s own RobertaPreLayerNorm export', sharedbert(
      'convert_hf', 'import', f'--hf_dir={root}/exports/out', f'--workdir={root}/reimported'),
      0, check=lambda r: (root / 'reimported' / 'vocab.model').exists(), one_line=False))
  # 20. A rotary standard model exports as RoFormer.
  rope = root / 'rope'
  add(Case('export of a rotary standard model (RoFormerForMaskedLM)', sharedbert(
      'convert_hf', 'export', f'--workdir={rope}', f'--hf_dir={root}/rope_hf'), 0,
      check=lambda r: _config(root / 'rope_hf').get('model_type') == 'roformer',
      one_line=False),
      train_tiny(rope, '--config.model.position_embeddings=rotary',
                 '--config.model.pre_layer_norm=false'))
  # 21. A notebook: restore, then transformers' fill-mask pipeline, in one process.
  notebook = (f'import importlib.util, sys\nimport sharedbert\n'
              f'run = sharedbert.restore({str(base)!r})\nrun.fill_mask("the [MASK] .")\n'
              f'assert "tensorflow" not in sys.modules\n'
              f'if importlib.util.find_spec("transformers"):\n'
              f'  from transformers import pipeline\n'
              f'  pipeline("fill-mask", model={str(root / "exports" / "out")!r})("the [MASK] .")\n')
  add(Case('notebook: sharedbert.restore, then a transformers fill-mask pipeline',
           [sys.executable, '-c', notebook], 0, one_line=False))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--out', default='', help='Also write the table to this file.')
  parser.add_argument('--keep', default='', help='Scratch folder to keep (default: a temp one).')
  args = parser.parse_args()
  root = pathlib.Path(args.keep or tempfile.mkdtemp(prefix='faults-')).resolve()
  root.mkdir(parents=True, exist_ok=True)
  made = run(sharedbert('run', *TINY, '--config.total_steps=10', f'--workdir={root}/base'), REPO)
  if made.code != 0:
    sys.exit(f'could not make the base run:\n{made.stderr[-3000:]}')
  rows = ['| case | exit | non-log stderr lines | last line | as asked |', '|---|---|---|---|---|']
  failures = 0
  for case, setup in cases(root):
    setup()
    t0 = time.time()
    r = run(case.command, root, case.signal_after, signum=case.signum)
    ok = (r.code == case.expect_code and (not case.one_line or len(r.not_logs) == 1)
          and (case.check is None or case.check(r)))
    failures += not ok
    last = (r.not_logs[-1] if r.not_logs else '').replace('|', '/')
    last = last if len(last) <= 140 else last[:137] + '...'
    rows.append(f'| {case.name} | {r.code} | {len(r.not_logs)} | {last} | '
                f'{"yes" if ok else "NO"} ({time.time() - t0:.0f} s) |')
    print(rows[-1], flush=True)
  table = '\n'.join(rows)
  print('\n' + table)
  if args.out:
    pathlib.Path(args.out).write_text(table + '\n')
  if not args.keep:
    shutil.rmtree(root, ignore_errors=True)
  sys.exit(1 if failures else 0)


if __name__ == '__main__':
  main()
