"""The benchmark harness (JAX side): a tiny timed step, the fused bf16 path, the memory
search, the FLOP bookkeeping and the report. The Hugging Face peer is not run here: torch is
never a test dependency."""

import dataclasses
import json
import re

import numpy as np
import pytest

from sharedbert.lab.bench import run as bench
from sharedbert.lab.bench import report as bench_report
from sharedbert.models import flops
from sharedbert.models.bert import ModelConfig


@pytest.fixture(scope='module')
def smoke_rows():
  size = bench.SIZES['smoke']
  return {'standard': bench.time_train_step(size, 'standard', steps=2, warmup=1)}


def test_timed_step_reports_consistent_figures(smoke_rows):
  size = bench.SIZES['smoke']
  for variant, row in smoke_rows.items():
    assert len(row['step_times_s']) == 2 and row['step_time_s'] > 0
    assert row['tokens_per_s'] == pytest.approx(size.batch * size.seq_len / row['step_time_s'])
    cfg = ModelConfig.from_config(bench.bench_config(size, variant).model)
    assert row['flops_per_step'] == flops.train_step_flops(
        cfg, size.batch, size.seq_len, size.batch * size.max_predictions)
    assert row['achieved_flops_per_s'] == pytest.approx(row['flops_per_step'] / row['step_time_s'])
    assert row['memory_bytes'] > 0 and row['compile_s'] > 0
    assert np.isfinite(row['loss']) and row['loss'] > 0
    # XLA's own count includes elementwise work, so it is at least the matrix products'.
    if row['xla_flops_per_step'] is not None:
      assert row['xla_flops_per_step'] >= 0.9 * row['flops_per_step']


def test_fused_attention_in_bfloat16_runs_on_cpu():
  """The GPU check's code path (model.attention_impl='fused', model.dtype='bfloat16')."""
  row = bench.time_train_step(bench.SIZES['smoke_fused_bf16'], 'standard', steps=1, warmup=1)
  assert np.isfinite(row['loss']) and row['step_time_s'] > 0


def test_synthetic_batch_is_masked_like_the_pipeline():
  size = bench.SIZES['smoke']
  batch = bench.synthetic_batch(size)
  assert batch['input_ids'].shape == (size.batch, size.seq_len)
  assert batch['masked_positions'].shape == (size.batch, size.max_predictions)
  # round(0.15 * 15 candidate tokens) = 2 masked positions per row, none on [CLS].
  assert (batch['masked_weights'].sum(1) == 2).all()
  assert (batch['masked_positions'][batch['masked_weights'] > 0] > 0).all()


@pytest.mark.parametrize('per_example,fixed,budget', [
    (37, 1000, 10_000),     # Largest multiple of 8: 240 (9880 bytes).
    (1000, 50, 7_000),      # Only 0 fits at multiples of 8 (8 needs 8050).
    (5, 0, 10_000_000),     # Far from the first probes.
])
def test_largest_fitting_batch_finds_the_limit(per_example, fixed, budget):
  calls = []

  def memory(batch):
    calls.append(batch)
    # Not quite linear, as real buffer assignment is not: a step at every 64 examples.
    return fixed + per_example * batch + (batch // 64) * per_example

  found = bench.largest_fitting_batch(memory, budget)
  fits = lambda b: memory(b) <= budget
  assert found['batch'] % 8 == 0
  assert found['batch'] == 0 or fits(found['batch'])
  assert not fits(found['batch'] + 8)
  assert found['compiles'] <= 2 * max(found['batch'], 8).bit_length() + 4


def test_step_memory_of_an_abstract_batch_matches_the_timed_step(smoke_rows):
  """The memory search compiles against abstract inputs: the same program as the timed one."""
  memory = bench.step_memory_fn(bench.SIZES['smoke'], 'standard', 'none')
  assert memory(bench.SIZES['smoke'].batch) == smoke_rows['standard']['memory_bytes']


def _results(smoke_rows):
  size = bench.SIZES['smoke']
  rows = [dict(r) for r in smoke_rows.values()]
  peak = 2 * max(r['achieved_flops_per_s'] for r in rows)
  for r in rows:
    r['mfu'] = r['mfu_vs_measured_peak'] = flops.mfu(r['flops_per_step'], r['step_time_s'], peak)
  hf = {'tokens_per_s': rows[0]['tokens_per_s'] / 2, 'step_time_s': 2 * rows[0]['step_time_s'],
        'flops_per_step': 1e9, 'achieved_flops_per_s': 1e9, 'mfu': 0.1, 'torch': 'x',
        'attn_implementation': 'sdpa', 'threads': 2, 'peak_rss_bytes': 1 << 30,
        'first_step_s': 1.0}
  return {
      'command': 'python -m sharedbert.lab.bench --preset=smoke', 'preset': 'smoke',
      'machine': bench.machine_info(), 'started': 's', 'finished': 'f',
      'load_average_start': [0.5], 'load_average_end': [0.6], 'steps': 2, 'warmup': 1,
      'peak': {'matmul_n': 256, 'dtype': 'float32', 'measured_start_flops_per_s': peak,
               'measured_end_flops_per_s': peak, 'measured_flops_per_s': peak,
               'datasheet_flops_per_s': None, 'mfu_denominator': 'measured'},
      'sizes': {'smoke': {'size': dataclasses.asdict(size), 'description': size.text(),
                          'rows': rows, 'hf': hf}},
      'pipeline': {'batches_per_s': 100.0, 'prefetched_on_device_batches_per_s': 90.0,
                   'batch': 8, 'seq_len': 16, 'train_steps_per_s': 10.0, 'ratio': 9.0,
                   'train_variant': 'standard'},
  }


def test_targets_and_report(smoke_rows, tmp_path):
  results = _results(smoke_rows)
  targets = bench.check_targets(results, (
      ('smoke', 'standard / Hugging Face tokens/s', 1.8),
      ('smoke', 'standard / Hugging Face tokens/s', 2.5),
      ('smoke', 'standard MFU', 0.70),
      ('smoke', 'input pipeline / training step rate', 3.0),
      ('smoke', 'shared / standard tokens/s', 1.25)))
  assert [t['met'] for t in targets] == [True, False, False, True, None]
  assert targets[0]['value'] == pytest.approx(2.0)
  results['targets'] = targets
  text = bench.render_markdown(results)
  assert '| `standard` |' in text and '2.00×' in text
  assert 'python -m sharedbert.lab.bench --preset=smoke' in text
  path = tmp_path / 'BENCHMARKS.md'
  path.write_text('# Benchmarks\n\nNotes before.\n\n<!-- bench:begin -->\nold\n'
                  '<!-- bench:end -->\n\nNotes after.\n')
  bench.write_markdown(str(path), text)
  written = path.read_text()
  assert 'Notes before.' in written and 'Notes after.' in written and 'old' not in written
  assert written.count(bench_report.MARK_BEGIN) == 1
  json.dumps(results)  # The JSON report must serialize.


def test_input_pipeline_rate():
  out = bench.time_input_pipeline(bench.SIZES['smoke'], batches=5, rows=64)
  assert out['batches_per_s'] > 0 and out['prefetched_on_device_batches_per_s'] > 0


def test_rounds_time_every_variant_in_turn_and_pool_the_steps():
  """Rotary positions are timed beside the learned table, in the same rounds, and the report
  gives each variant's ratio (time and FLOPs: the rotation adds to the count)."""
  results = bench.run_benchmarks(
      preset='smoke', sizes=['smoke'], variants=['standard', 'shared'], steps=2, warmup=1,
      rounds=2, hf_python='', peak_n=64, peak_dtype='float32', memory_seq_lens=[],
      pipeline_size='', positions=('learned', 'rotary'))
  rows = results['sizes']['smoke']['rows']
  assert [r['variant'] for r in rows] == ['standard', 'standard+rotary', 'shared',
                                          'shared+rotary']
  for r in rows:
    assert len(r['step_times_s']) == 4  # 2 rounds x 2 timed steps.
    assert r['step_time_s'] == pytest.approx(float(np.median(r['step_times_s'])))
  assert rows[1]['flops_per_step'] > rows[0]['flops_per_step']
  assert 'skipped' in results['sizes']['smoke']['hf']
  text = bench.render_markdown(results)
  assert '2 round(s)' in text
  ratio = rows[3]['step_time_s'] / rows[2]['step_time_s']
  assert f'| `shared` | rotary | {rows[3]["step_time_s"] * 1e3:.1f} |' in text
  assert f'{ratio:.3f}×' in text


def test_peer_rounds_merge_into_one_row():
  size = bench.SIZES['smoke']
  runs = [dict(step_times_s=[1.0, 3.0], step_time_s=2.0, peak_rss_bytes=5, first_step_s=9.0,
               flops_per_step=100.0, torch='x'),
          dict(step_times_s=[2.0, 4.0], step_time_s=3.0, peak_rss_bytes=7, first_step_s=1.0,
               flops_per_step=100.0, torch='x')]
  out = bench._merge_hf_runs(size, runs)
  assert out['step_times_s'] == [1.0, 3.0, 2.0, 4.0] and out['step_time_s'] == 2.5
  assert out['peak_rss_bytes'] == 7 and out['first_step_s'] == 9.0
  assert out['tokens_per_s'] == pytest.approx(size.batch * size.seq_len / 2.5)
  assert out['achieved_flops_per_s'] == pytest.approx(40.0)


def test_accelerator_tools_run_without_tensorflow():
  """CUDA images often lack TensorFlow (the H200 machines here do): the benchmark, the
  profiler and tools/gpu_parity.py import nothing of it. gpu_parity runs whole, on the CPU."""
  import os
  import subprocess
  import sys
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  code = ("import sys, runpy\n"
          "sys.modules['tensorflow'] = sys.modules['tensorflow_datasets'] = None\n"
          "import sharedbert.lab.bench.run\n"
          "sys.path.insert(0, 'tools'); import profile_step\n"
          "sys.argv = ['gpu_parity', '--variants=shared']\n"
          "runpy.run_path('tools/gpu_parity.py', run_name='__main__')\n")
  out = subprocess.run([sys.executable, '-c', code], cwd=root, capture_output=True, text=True,
                       env={**os.environ, 'JAX_PLATFORMS': 'cpu'}, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  assert 'no accelerator' in out.stdout
  assert re.search(r'^shared \| 9\.\d+ \| 0\.0e\+00 \| 0\.0e\+00', out.stdout, re.M), out.stdout
  assert 'OK: every variant' in out.stdout


def _load_profile_step():
  import importlib.util
  import os
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  spec = importlib.util.spec_from_file_location('profile_step',
                                                os.path.join(root, 'tools', 'profile_step.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_gpu_profile_attributes_kernels_to_the_model(tmp_path, capsys):
  """tools/profile_step.py on a GPU trace: a fusion's kernel (input_reduce_fusion_9) is found
  as %input_reduce_fusion.9 in the HLO, a library kernel through the trace's hlo_op, and each
  lands in its part of the model and pass; a kernel with neither stays unattributed."""
  import gzip
  import json
  profile_step = _load_profile_step()
  hlo = ('\n  %input_reduce_fusion.9 = f32[128,256]{1,0} fusion(%p), kind=kInput, '
         'metadata={op_name="jit(train_step)/transpose(jvp(BertForPretraining))/bert/layer_3/'
         'layer_3.sublayers/output_norm/neg"}\n'
         '  %custom-call.3 = bf16[32768,3072]{1,0} custom-call(%a, %b), '
         'metadata={op_name="jit(train_step)/jvp(BertForPretraining)/bert/layer_0/'
         'layer_0.sublayers/mlp/intermediate/dot_general"}\n')
  events = [
      {'ph': 'M', 'name': 'process_name', 'pid': 1, 'args': {'name': '/device:GPU:0'}},
      {'ph': 'M', 'name': 'process_name', 'pid': 2, 'args': {'name': '/host:CPU'}},
      {'ph': 'X', 'pid': 1, 'name': 'input_reduce_fusion_9', 'ts': 0, 'dur': 2000},
      {'ph': 'X', 'pid': 1, 'name': 'nvjet_sm90_tst_128x128', 'ts': 2000, 'dur': 3000,
       'args': {'hlo_op': 'custom-call.3'}},
      {'ph': 'X', 'pid': 1, 'name': 'cudnn_generated_sdpa_fprop', 'ts': 6000, 'dur': 1000},
      {'ph': 'X', 'pid': 2, 'name': 'host work', 'ts': 0, 'dur': 9000},
  ]
  run = tmp_path / 'plugins' / 'profile' / 'run'
  run.mkdir(parents=True)
  with gzip.open(run / 'perfetto_trace.json.gz', 'wt') as f:
    json.dump({'traceEvents': events}, f)
  profile_step.summarise_device(str(tmp_path), hlo, steps=1, top=3)
  out = capsys.readouterr().out
  assert re.search(r'^layernorm +backward +other kernels +2\.00$', out, re.M), out
  assert re.search(r'^ffn +forward +matrix products +3\.00$', out, re.M), out
  assert re.search(r'^unattributed +forward +attention kernels +1\.00$', out, re.M), out
  assert 'span 7.0 ms/step, a kernel running 6.0 ms/step, 3 kernels/step' in out
  assert re.search(r'input_reduce_fusion_9 .*layer_3/layer_3\.sublayers/output_norm/neg', out)


def test_tools_run_from_a_checkout_that_is_not_installed(tmp_path):
  """On a bare GPU machine the checkout is not pip-installed: `python3 tools/X.py` must find
  the package from the script's own location (sys.path[0] is tools/, not the root)."""
  import os
  import subprocess
  import sys
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  for tool in ('profile_step.py', 'gpu_parity.py'):
    # Loads the script (its imports) without running main(), with an editable install's
    # finder hidden, as on a machine where nothing is installed.
    code = ("import runpy, sys\n"
            "sys.meta_path = [f for f in sys.meta_path if 'editable' not in repr(f)]\n"
            f"sys.path[0] = {os.path.join(root, 'tools')!r}\n"
            f"runpy.run_path({os.path.join(root, 'tools', tool)!r}, run_name='loaded')\n"
            "print('loaded')\n")
    out = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, capture_output=True,
                         text=True, env={**os.environ, 'JAX_PLATFORMS': 'cpu'}, timeout=300)
    assert out.returncode == 0 and 'loaded' in out.stdout, (tool, out.stderr[-2000:])


@pytest.mark.parametrize('name', sorted(bench.SIZES))
def test_every_bench_size_is_a_valid_config(name):
  """A size that sharedbert would refuse (cuDNN in float32, say) fails here, on the CPU, not
  minutes into a lent GPU's time; and each size's settings reach the model config."""
  size = bench.SIZES[name]
  for variant in ('standard', 'shared'):
    cfg = ModelConfig.from_config(bench.bench_config(size, variant).model)
    assert (cfg.attention_impl, cfg.attention_dropout_rate, cfg.one_hot_embeddings,
            cfg.num_layers, cfg.hidden_size) == (size.attention_impl,
                                                 size.attention_dropout_rate,
                                                 size.one_hot_embeddings, size.num_layers,
                                                 size.hidden_size)
