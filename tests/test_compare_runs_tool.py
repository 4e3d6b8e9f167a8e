"""tools/compare_runs.py: two runs' result files compared with timings and paths left out."""

import importlib.util
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location('compare_runs',
                                              os.path.join(ROOT, 'tools', 'compare_runs.py'))
compare_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_runs)


def _run(root, loss, wall, extra=None):
  os.makedirs(root / 'task' / 'seed_0')
  (root / 'metrics.jsonl').write_text(
      json.dumps({'step': 1, 'loss': loss, 'step_time': wall}) + '\n')
  (root / 'task' / 'seed_0' / 'metrics.json').write_text(json.dumps(
      {'score': 0.5, 'train_time_s': wall, 'init_from': str(root / 'pre'), **(extra or {})}))


def test_timings_and_paths_are_left_out_and_a_real_difference_is_found(tmp_path):
  _run(tmp_path / 'a', 1.25, 3.0)
  _run(tmp_path / 'b', 1.25, 9.0)
  assert compare_runs.compare(str(tmp_path / 'a'), str(tmp_path / 'b')) == [
      ('metrics.jsonl', 'identical'), ('task/seed_0/metrics.json', 'identical')]
  assert compare_runs.main(['x', str(tmp_path / 'a'), str(tmp_path / 'b')]) == 0
  _run(tmp_path / 'c', 1.2500001, 3.0, {'rope_theta': 1.0})
  assert compare_runs.compare(str(tmp_path / 'a'), str(tmp_path / 'c')) == [
      ('metrics.jsonl', 'different'), ('task/seed_0/metrics.json', 'different')]
  os.remove(tmp_path / 'b' / 'metrics.jsonl')
  assert ('metrics.jsonl', 'missing') in compare_runs.compare(str(tmp_path / 'a'),
                                                              str(tmp_path / 'b'))
  assert compare_runs.main(['x', str(tmp_path / 'a'), str(tmp_path / 'b')]) == 1
