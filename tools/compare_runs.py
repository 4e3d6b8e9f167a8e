r"""Whether two runs of the same commands wrote the same results, timings aside: the check
that a refactor kept behaviour identical (issue 55).

  python tools/compare_runs.py OLD_DIR NEW_DIR

Every metrics.jsonl, summary.json, results.json and metrics.json under OLD_DIR is compared
with the file at the same place under NEW_DIR, after leaving out timing keys (ending in _s,
or holding time, wall, seconds or tokens_per_sec, or eta) and replacing each directory's
own path with W. Prints one line a file; exits 1 if any differs or is missing."""

import json
import os
import sys

NAMES = ('metrics.jsonl', 'summary.json', 'results.json', 'metrics.json')


def is_timing(key: str) -> bool:
  return (key.endswith('_s') or key in ('eta', 'timestamp')
          or any(t in key for t in ('time', 'wall', 'tokens_per_sec', 'seconds')))


def normalized(value, root: str):
  if isinstance(value, dict):
    return {k: normalized(v, root) for k, v in value.items() if not is_timing(k)}
  if isinstance(value, list):
    return [normalized(v, root) for v in value]
  if isinstance(value, str):
    return value.replace(os.path.abspath(root), 'W')
  return value


def load(path: str, root: str):
  with open(path, encoding='utf-8') as f:
    if path.endswith('.jsonl'):
      return [normalized(json.loads(line), root) for line in f if line.strip()]
    return normalized(json.load(f), root)


def compare(old: str, new: str) -> list[tuple[str, str]]:
  """[(relative path, 'identical' | 'different' | 'missing')] for every result file of old."""
  out = []
  for folder, _, files in sorted(os.walk(old)):
    for name in sorted(files):
      if name not in NAMES:
        continue
      rel = os.path.relpath(os.path.join(folder, name), old)
      other = os.path.join(new, rel)
      if not os.path.isfile(other):
        out.append((rel, 'missing'))
        continue
      same = load(os.path.join(old, rel), old) == load(other, new)
      out.append((rel, 'identical' if same else 'different'))
  return out


def main(argv) -> int:
  if len(argv) != 3:
    print(__doc__)
    return 2
  rows = compare(argv[1], argv[2])
  for rel, status in rows:
    print(f'{rel}: {status}')
  if not rows:
    print(f'no result files under {argv[1]}')
  return 0 if rows and all(s == 'identical' for _, s in rows) else 1


if __name__ == '__main__':
  sys.exit(main(sys.argv))
