"""The device mesh and the placement of parameters, optimizer state and batches on it.

Mesh axes: 'data' (pure data parallelism), 'fsdp' (data parallelism with parameters and
optimizer state sharded along their embedding axis) and 'tensor' (Megatron-style splitting
of heads, FFN and vocabulary). Modules annotate every parameter with logical axis names;
`config.mesh.logical_axis_rules` maps those names to mesh axes. Sizes come from
`config.mesh.{data,fsdp,tensor}`, one of which may be -1 (fill in the remaining devices).
"""

from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from sharedbert.errors import UserError

MESH_AXES = ('data', 'fsdp', 'tensor')
BATCH_AXES = ('data', 'fsdp')


def mesh_shape(mesh_cfg, num_devices: int) -> tuple[int, int, int]:
  """(data, fsdp, tensor) sizes for `num_devices`, a -1 filled in; a UserError when they do
  not multiply out.

  Args:
    mesh_cfg: config.mesh (data, fsdp, tensor; one of them may be -1).
    num_devices: the devices to cover.
  Returns:
    (data, fsdp, tensor).
  """
  sizes = [int(mesh_cfg[a]) for a in MESH_AXES]
  if sizes.count(-1) > 1:
    raise UserError('at most one of mesh.data, mesh.fsdp, mesh.tensor may be -1')
  if any(s == 0 or s < -1 for s in sizes):
    raise UserError(f'mesh sizes must be positive or -1, got {dict(zip(MESH_AXES, sizes))}')
  known = math.prod(s for s in sizes if s != -1)
  if -1 in sizes:
    if num_devices % known:
      raise UserError(f'mesh {dict(zip(MESH_AXES, sizes))} does not divide the {num_devices} '
                      'devices; choose sizes whose product divides the device count')
    sizes[sizes.index(-1)] = num_devices // known
  if math.prod(sizes) != num_devices:
    raise UserError(f'mesh {dict(zip(MESH_AXES, sizes))} has {math.prod(sizes)} devices but '
                    f'{num_devices} are available; make mesh.data*mesh.fsdp*mesh.tensor equal '
                    f'{num_devices} (or set one of them to -1)')
  return tuple(sizes)


def make_mesh(mesh_cfg, devices=None) -> jax.sharding.Mesh:
  """The device mesh of `mesh_cfg` over `devices`, axes ('data', 'fsdp', 'tensor').

  Args:
    mesh_cfg: sizes of data, fsdp and tensor (config.mesh); one may be -1 for the rest.
    devices: the devices to lay out (default: every device of every process).
  Returns:
    A jax.sharding.Mesh with Auto axis types.
  """
  devices = jax.devices() if devices is None else devices
  shape = mesh_shape(mesh_cfg, len(devices))
  # Auto axes: the partitioner propagates shardings from the annotated inputs and the
  # logical constraints inside the model.
  return jax.make_mesh(shape, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 3,
                       devices=devices)


def rules(config) -> tuple:
  """config.mesh.logical_axis_rules as tuples, for nn.logical_axis_rules.

  Args:
    config: a run's config.
  Returns:
    ((logical name, mesh axis or axes or None), ...).
  """
  return tuple((name, tuple(axes) if isinstance(axes, list) else axes)
               for name, axes in config.mesh.logical_axis_rules)


def logical_shardings(abstract_tree, mesh, axis_rules):
  """NamedShardings for a tree of (possibly boxed) abstract values, from their axis names.

  Args:
    abstract_tree: values (nn.Partitioned boxes carry the logical axis names).
    mesh: the device mesh.
    axis_rules: logical axis name -> mesh axes.
  Returns:
    A tree of jax.sharding.NamedSharding like `abstract_tree`.
  Raises:
    UserError naming the first array whose dimension the mesh cannot split evenly.
  """
  specs = nn.get_partition_spec(abstract_tree)
  shardings = nn.logical_to_mesh_sharding(specs, mesh, axis_rules)
  check_divisible(abstract_tree, specs, shardings)
  return shardings


def _path_text(path) -> str:
  return '/'.join(str(getattr(k, 'key', getattr(k, 'name', getattr(k, 'idx', k)))) for k in path)


def check_divisible(abstract_tree, logical_specs, shardings):
  """Every sharded dimension must be a multiple of the mesh axes it is split over.

  Args:
    abstract_tree: the params as ShapeDtypeStructs.
    logical_specs: their logical PartitionSpecs.
    shardings: their NamedShardings.
  Raises:
    UserError: a dimension that does not divide, named with its parameter and axes.
  Returns:
    None.
  """
  values = jax.tree_util.tree_leaves_with_path(nn.unbox(abstract_tree))
  names = jax.tree.leaves(logical_specs, is_leaf=lambda x: isinstance(x, P))
  for (path, value), logical, named in zip(values, names, jax.tree.leaves(shardings)):
    mesh_sizes = named.mesh.shape
    for dim, axes in enumerate(named.spec):
      if axes is None:
        continue
      axes = (axes,) if isinstance(axes, str) else tuple(axes)
      parts = math.prod(mesh_sizes[a] for a in axes)
      if value.shape[dim] % parts:
        where = ' x '.join(f'mesh.{a}={mesh_sizes[a]}' for a in axes)
        raise UserError(
            f'{_path_text(path)} has shape {tuple(value.shape)}: its dimension {dim} (size '
            f'{value.shape[dim]}, logical axis {logical[dim]!r}) cannot be split over {where}; '
            'choose mesh sizes that divide it, or map that logical axis elsewhere in '
            'config.mesh.logical_axis_rules')


def batch_sharding(mesh) -> NamedSharding:
  """Rows split over the data and fsdp axes.

  Args:
    mesh: the device mesh.
  Returns:
    NamedSharding of P(('data', 'fsdp')).
  """
  return NamedSharding(mesh, P(BATCH_AXES))


def replicated(mesh) -> NamedSharding:
  """The same value on every device of `mesh`.

  Args:
    mesh: the device mesh.
  Returns:
    NamedSharding of P().
  """
  return NamedSharding(mesh, P())


def data_parallel_size(mesh) -> int:
  """How many ways a batch's rows are split (mesh.data * mesh.fsdp).

  Args:
    mesh: the device mesh.
  Returns:
    mesh.data * mesh.fsdp.
  """
  return mesh.shape['data'] * mesh.shape['fsdp']


@functools.lru_cache(maxsize=None)
def process_batch_block(mesh) -> tuple[int, int]:
  """Which rows of every global batch this process feeds: block `index` of `count`.

  The global batch is cut into `count` equal blocks of consecutive rows. The devices of
  this process hold the rows of one block: usually (index, count) is (process_index,
  process_count), but processes whose devices hold the same batch shards (a mesh whose
  'tensor' axis spans hosts, say) read the same block, and the input pipeline must give
  them the same rows.

  Args:
    mesh: the device mesh.
  Returns:
    (index, count).
  """
  dp = data_parallel_size(mesh)
  rows = sorted({index[0].start or 0 for index in
                 batch_sharding(mesh).addressable_devices_indices_map((dp,)).values()})
  size = len(rows)
  if rows != list(range(rows[0], rows[0] + size)) or rows[0] % size:
    raise UserError(
        f'the mesh {dict(mesh.shape)} gives process {jax.process_index()} the batch shards '
        f'{rows} of {dp}, which are not one block of consecutive shards; choose mesh sizes '
        'that give each host whole rows of the (data, fsdp) grid, e.g. mesh.data = the number '
        'of hosts')
  return rows[0] // size, dp // size


def global_batch(local_batch: dict[str, np.ndarray], mesh) -> dict[str, jax.Array]:
  """Assembles each process's block of rows into global arrays sharded over the batch axes.

  Args:
    local_batch: name -> this process's rows [b, ...] (process_batch_block's block).
    mesh: the device mesh.
  Returns:
    name -> a global jax.Array [b * processes, ...], rows over the data and fsdp axes.
  """
  sharding = batch_sharding(mesh)
  _, count = process_batch_block(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, v, (len(v) * count, *v.shape[1:]))
          for k, v in local_batch.items()}
