"""Checkpoints prove themselves: a same-size corruption of a real checkpoint file (bits
XOR-ed in place, as a failing disk or a bad copy leaves them) is caught at restore by the
fingerprint saved with the step, and the step before is used."""

import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from sharedbert import checkpoint as checkpoint_lib
from sharedbert.errors import UserError


def _state(seed):
  rng = np.random.default_rng(seed)
  return {'params': {'w': jnp.asarray(rng.standard_normal((64, 64)), jnp.float32),
                     'b': jnp.asarray(rng.standard_normal(64), jnp.bfloat16)},
          'nu': jnp.asarray(rng.random((64, 64)), jnp.float32),
          'step': jnp.asarray(seed, jnp.int32), 'key': jax.random.key(seed)}


def _checkpointer(workdir):
  cfg = ml_collections.ConfigDict(dict(every_steps=1, max_to_keep=3, async_save=False))
  return checkpoint_lib.Checkpointer(str(workdir), cfg)


def _abstract(state):
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state)


def _flip(step_dir, nbytes=4096):
  """XORs `nbytes` bytes in the middle of the largest data file of the step's state."""
  files = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(step_dir, 'state'))
           for f in fs]
  path = max(files, key=os.path.getsize)
  size = os.path.getsize(path)
  start = max(0, size // 2 - nbytes // 2)
  with open(path, 'r+b') as f:
    f.seek(start)
    data = bytearray(f.read(min(nbytes, size - start)))
    f.seek(start)
    f.write(bytes(b ^ 0x5A for b in data))
  assert os.path.getsize(path) == size
  return path


def test_fingerprint_sees_one_flipped_bit_and_non_finite_values():
  state = _state(0)
  sums, finite = checkpoint_lib.fingerprint(state)
  assert finite and len(sums) == len(jax.tree.leaves(state))
  w = np.asarray(state['params']['w']).copy()
  w.view(np.uint32)[5, 7] ^= 1 << 3  # One bit.
  changed = dict(state, params=dict(state['params'], w=jnp.asarray(w)))
  assert checkpoint_lib.fingerprint(changed)[0] != sums
  meta = {checkpoint_lib.FINGERPRINT_KEY: sums}
  assert checkpoint_lib.verify(state, meta) is None
  assert 'checksum' in checkpoint_lib.verify(changed, meta)
  nan = dict(state, nu=state['nu'].at[0, 0].set(jnp.nan))
  assert 'non-finite' in checkpoint_lib.verify(nan, {})


def _xor(path, start, nbytes):
  with open(path, 'r+b') as f:
    f.seek(start)
    data = bytearray(f.read(nbytes))
    f.seek(start)
    f.write(bytes(b ^ 0x5A for b in data))


def _silent_flip(workdir, step, template):
  """XORs 64 bytes of the step's data where orbax still reads the step without an error
  (the corruption the fingerprint exists for), trying offsets through the data files;
  returns the file flipped."""
  import orbax.checkpoint as ocp
  files = sorted((os.path.join(d, f) for d, _, fs in
                  os.walk(os.path.join(workdir, 'checkpoints', str(step), 'state'))
                  for f in fs if '/d/' in os.path.join(d, f)), key=os.path.getsize, reverse=True)
  for path in files:
    for start in range(0, os.path.getsize(path) - 64, 256):
      _xor(path, start, 64)
      ckpt = _checkpointer(workdir)
      try:
        out = ckpt.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(_abstract(template)), meta=ocp.args.JsonRestore()))
        changed = any(not np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(
            jax.tree.leaves(jax.tree.map(lambda k: jax.random.key_data(k) if jax.dtypes.issubdtype(
                k.dtype, jax.dtypes.prng_key) else k, out['state'])),
            jax.tree.leaves(jax.tree.map(lambda k: jax.random.key_data(k) if jax.dtypes.issubdtype(
                k.dtype, jax.dtypes.prng_key) else k, _state(step)))))
      except Exception:  # pylint: disable=broad-except
        changed = False
      finally:
        ckpt.close()
      if changed:
        return path
      _xor(path, start, 64)  # Undo: that spot fails loudly, or held no array data.
  raise AssertionError('no offset gave a silent corruption')


def test_a_bit_flipped_checkpoint_is_damaged_and_the_one_before_is_restored(tmp_path):
  ckpt = _checkpointer(tmp_path)
  for step in (1, 2):
    assert ckpt.save(step, _state(step), {'step': step})
  ckpt.wait()
  ckpt.close()
  # Orbax reads the flipped step without complaint; the fingerprint does not match.
  _silent_flip(str(tmp_path), 2, _state(0))
  ckpt = _checkpointer(tmp_path)
  state, meta, step = ckpt.restore(_abstract(_state(0)))
  assert step == 1 and ckpt.damaged_steps == [2] and meta['step'] == 1
  np.testing.assert_array_equal(np.asarray(state['nu']), np.asarray(_state(1)['nu']))
  ckpt.close()
  checkpoint_lib.set_aside_damaged(str(tmp_path), [2])
  assert sorted(os.listdir(tmp_path / 'checkpoints-damaged'))[0].startswith('2-')
  assert checkpoint_lib.Checkpointer(str(tmp_path), None, read_only=True).all_steps() == [1]


def test_a_loud_corruption_is_damaged_too(tmp_path):
  ckpt = _checkpointer(tmp_path)
  for step in (1, 2):
    assert ckpt.save(step, _state(step), {'step': step})
  ckpt.wait()
  ckpt.close()
  _flip(os.path.join(tmp_path, 'checkpoints', '2'))
  ckpt = _checkpointer(tmp_path)
  _, _, step = ckpt.restore(_abstract(_state(0)))
  assert step == 1 and ckpt.damaged_steps == [2]
  ckpt.close()


def test_when_every_checkpoint_is_damaged_the_error_says_so(tmp_path):
  ckpt = _checkpointer(tmp_path)
  assert ckpt.save(1, _state(1), {'step': 1})
  ckpt.wait()
  ckpt.close()
  _flip(os.path.join(tmp_path, 'checkpoints', '1'))
  ckpt = _checkpointer(tmp_path)
  with pytest.raises(UserError, match='no checkpoint in .* could be restored'):
    ckpt.restore(_abstract(_state(0)))
  ckpt.close()
