"""The two layouts of an encoder's parameters: one subtree a layer (bert/layer_<i>/...), or
the layers stacked on a leading [L] axis (bert/layers/..., model.scan_layers). A run may
switch layout when it resumes, and the converters work layer by layer: these move a tree
between them: any tree that holds an encoder's parameters (a train state, an optimizer's
moments)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def _is_encoder(node) -> bool:
  return isinstance(node, dict) and ('layer_0' in node or 'layers' in node) and (
      'embeddings' in node or 'pooler' in node)


def _stack(xs):
  return np.stack(xs) if all(isinstance(x, np.ndarray) for x in xs) else jnp.stack(xs)


def _stack_encoder(node):
  if not _is_encoder(node) or 'layers' in node:
    return node
  count = sum(1 for k in node if k.startswith('layer_'))
  out = {k: v for k, v in node.items() if not k.startswith('layer_')}
  out['layers'] = jax.tree.map(lambda *xs: _stack(xs),
                               *[node[f'layer_{i}'] for i in range(count)])
  return out


def _unstack_encoder(node):
  if not _is_encoder(node) or 'layers' not in node:
    return node
  out = {k: v for k, v in node.items() if k != 'layers'}
  count = jax.tree.leaves(node['layers'])[0].shape[0]
  for i in range(count):
    out[f'layer_{i}'] = jax.tree.map(lambda x: x[i], node['layers'])
  return out


def stack_layers(tree):
  """The scanned layout of a params tree: bert/layer_<i>/... -> bert/layers/...

  Args:
    tree: a tree holding an encoder's params anywhere (a train state, a classifier).
  Returns:
    The same tree with each encoder's layers stacked ([L, ...] each); a tree already
    stacked is returned as it is.
  """
  return jax.tree.map(_stack_encoder, tree, is_leaf=_is_encoder)


def unstack_layers(tree):
  """The unrolled layout of a params tree, the inverse of stack_layers.

  Args:
    tree: a tree whose encoders' layers are stacked (bert/layers/..., [L, ...] each).
  Returns:
    The same tree with bert/layer_<i>/... per layer.
  """
  return jax.tree.map(_unstack_encoder, tree, is_leaf=_is_encoder)


def to_layout(tree, scan_layers: bool):
  """`tree` in the layout of model.scan_layers, whichever it is in now.

  Args:
    tree: a tree holding encoder params, stacked or not.
    scan_layers: the layout wanted (True: stacked).
  Returns:
    The tree in that layout.
  """
  return stack_layers(tree) if scan_layers else unstack_layers(tree)
