"""Synthetic probe tasks for the attention variants, generated on the fly from a seeded RNG.

Every task writes batches of one layout, so that all tasks run through one compiled
program per variant: token ids [B,T] (PAD, CLS, SEP, AFTER, BEFORE, MASK, then the content
symbols 0..vocab_size-1 at ids NUM_SPECIAL...), segment ids (0 for the context, 1 for the
queries), an input mask, and P prediction slots per row: the position to read, the token
id to predict there, a weight (0 for unused slots) and a kind (the directed task's
direction, 0 elsewhere). The model predicts the label token from the encoder's output at
that position (the masked-LM head over the whole vocabulary), so no answer is in the input.

Tasks (configs/probe.py holds their difficulty knobs):
  mqar       multi-query associative recall as Zoology builds it (Arora et al. 2023,
             arXiv 2312.04927): N key-value pairs, keys drawn from `key_vocab` symbols and
             values from `value_vocab` others (disjoint), then every key again in random
             order; predict each key's value at the key itself. Meant for a causal model
             (`model.causal`, as in Zoology), where the query position sees only what came
             before it, so reading the answer there needs nothing after it.
  cyclic     direction, isolated: the content symbols 0..vocab_size-1 lie on a cycle; two
             distinct symbols are shown in random order, then a third as the query; predict
             which of the two comes first going round the cycle from the query. Read by
             pointer: the prediction is the argmax of the first layer's attention logits
             (mean over heads) from the query to the two shown symbols, so only the scores
             can answer. With no position embeddings and one segment, the query and the shown
             symbols pass through the same input map, and a symmetric score
             s(x, y) = M[x, y] + g[x] + h[y] (M symmetric) must answer a -> b, b -> c and
             c -> a for a triple a, b, c in cyclic order with margins
             m1 = M_ab - M_ac + h_b - h_c, m2 = M_bc - M_ab + h_c - h_a and
             m3 = M_ac - M_bc + h_a - h_b all positive, but m1 + m2 + m3 = 0. So at most 2
             of a triple's 3 queries are right (`symmetric_bound`, 2/3, which
             M[x, y] = max(x, y) - min(x, y)/n reaches). Trained, it is worse: every triple
             and query is equally likely, and cross-entropy (any convex loss of the margin)
             summed over a triple's three queries is smallest, given m1 + m2 + m3 = 0, at
             m1 = m2 = m3 = 0 (Jensen). The loss's minimum is chance, so a symmetric score
             trained on this task ends near 1/2 (`symmetric_ceiling`).
  cyclic_nearest
             the control of `cyclic`: the same input and readout, the label the shown symbol
             nearer to the query round the cycle in either direction (ties are not drawn). The
             relation is symmetric, so symmetric scores can express it: a variant that fails
             here fails for another reason than symmetry.
  mirror     direction in positions, isolated (issue 53): one symbol x three times, at
             i - d, i and i + d (1 <= d <= `max_distance`, i at random), every other slot
             padding; predict, by the same pointer readout from position i, the copy after it.
             The content is the same at all three places, so only positions can answer. It
             runs once per arm of `positions` (task ids mirror_learned, mirror_rotary,
             mirror_phase: model.position_embeddings learned, rotary, and rotary with
             model.rope_query_phase = `query_phase`). Under rotary positions with phi = 0 a
             symmetric score matrix (Q = K: symmetric, single) scores the two copies
             q^T R(d) q and q^T R(-d) q, equal because x^T A x = x^T A^T x: every row is a
             tie, and a tie counts half, so its accuracy is exactly 1/2 trained or not
             (`symmetric_ceiling`, `symmetric_bound`). shared's rotary score
             s^T D_q R(d) D_k s is not symmetric in d where d_q and d_k differ inside a
             rotated pair, so it can answer; so can Q = K with phi != 0: the two copies
             score sum_p |q_p|^2 cos((d -+ phi) w_p), and phi > 0 brings the later copy
             nearer. With a learned table the ceiling does not apply: a key term h(j)
             decreasing or increasing in the absolute position j answers through the bias.
             Under rotary positions the cyclic task's ceiling does not apply either: its
             shown symbols sit at offsets -3 and -2 from the query, and a Q = K score at a
             fixed offset d, q_x^T R(d) q_y, is not symmetric in the symbols x, y.
  directed   a sequence of L distinct symbols, then Q queries "AFTER x" or "BEFORE x";
             predict the symbol right after (before) x. A symmetric score can still answer
             through the absolute position embeddings, the FFN and the residual, so this
             measures how fast a variant learns a direction carried by positions; not in
             the default task list (`cyclic` is the direction probe).
  induction  L distinct symbols, then Q of them (not the last) in random order; predict
             the symbol that followed each one's earlier occurrence (an induction head's
             job, "A B ... A -> B", without a causal mask).
  majority   the control: `length` symbols from an alphabet of `num_symbols`, the most
             frequent one ahead of the runner-up by at least `margin`; predict it at CLS.
             Needs attention to pool, but no direction.

Pointer tasks (`POINTER_TASKS`) put a position in `labels`; the others a token id, read
through the masked-LM head.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np

from sharedbert.errors import UserError

PAD, CLS, SEP, AFTER, BEFORE, MASK = range(6)
NUM_SPECIAL = 6
SPECIAL_NAMES = ('PAD', 'CLS', 'SEP', 'AFTER', 'BEFORE', 'MASK')
TASKS = ('mqar', 'cyclic', 'cyclic_nearest', 'mirror', 'directed', 'induction', 'majority')
POINTER_TASKS = ('cyclic', 'cyclic_nearest', 'mirror')  # Labels are positions (docstring).
# mirror's arms: task id suffix -> what it sets on the model (besides mirror.model).
POSITION_ARMS = ('learned', 'rotary', 'phase')
DIRECTIONS = ('after', 'before')  # The directed task's kinds, in `kind` order.


def symbol(s):
  """Token id of content symbol s (an int or an array)."""
  return np.asarray(s) + NUM_SPECIAL


def model_vocab_size(vocab_size: int) -> int:
  return NUM_SPECIAL + int(vocab_size)


def num_symbols(name: str, cfg) -> int:
  """Content symbols a task draws from: its own vocabularies (mqar) or cfg.vocab_size."""
  if name == 'mqar':
    return int(cfg.mqar.key_vocab) + int(cfg.mqar.value_vocab)
  return int(cfg.vocab_size)


@dataclasses.dataclass
class Batch:
  input_ids: np.ndarray   # [B,T] int32
  segment_ids: np.ndarray  # [B,T] int32
  input_mask: np.ndarray   # [B,T] int32
  positions: np.ndarray    # [B,P] int32, where the predictions are read
  labels: np.ndarray       # [B,P] int32, token ids to predict
  weights: np.ndarray      # [B,P] float32, 1 for a real prediction
  kinds: np.ndarray        # [B,P] int32 (directed: 0 after, 1 before)

  def as_dict(self) -> dict[str, np.ndarray]:
    return dataclasses.asdict(self)


def task_ids(config) -> list[str]:
  """config.tasks, each followed by its extra settings: MQAR at config.mqar.more_pairs
  pairs as `mqar_p<N>`."""
  out = []
  for task in config.tasks:
    if task == 'mirror':  # One id per position arm, no plain one.
      out += [f'mirror_{arm}' for arm in config.mirror.positions]
      continue
    out.append(task)
    if task == 'mqar':
      out += [f'mqar_p{int(p)}' for p in config.mqar.get('more_pairs', ())]
  return out


def base_task(task_id: str) -> str:
  if task_id.startswith('mqar_p'):
    return 'mqar'
  return 'mirror' if task_id.startswith('mirror_') else task_id


def position_keys(config, task_id: str) -> dict:
  """The model keys a task id's position arm sets (mirror's), or {}."""
  if not task_id.startswith('mirror_'):
    return {}
  arm = task_id[len('mirror_'):]
  if arm == 'learned':
    return {'position_embeddings': 'learned'}
  if arm == 'rotary':
    return {'position_embeddings': 'rotary', 'rope_query_phase': 0.0}
  return {'position_embeddings': 'rotary',
          'rope_query_phase': float(config.mirror.query_phase)}


def task_config(config, task_id: str):
  """The config a task id's data comes from: `config`, or a copy with its own pairs (mirror's
  arms share their data; they differ in the model, `position_keys`)."""
  if not task_id.startswith('mqar_p'):
    return config
  cfg = copy.deepcopy(config)
  cfg.mqar.num_pairs = int(task_id[len('mqar_p'):])
  return cfg


def swept(config, task_id: str) -> bool:
  sweep = config.get('lr_sweep')
  return sweep is not None and base_task(task_id) in tuple(sweep.tasks)


def num_predictions(name: str, cfg) -> int:
  """Prediction slots a task uses per row."""
  if name in ('majority',) + POINTER_TASKS:
    return 1
  if name == 'mqar':
    return int(cfg.mqar.num_pairs)
  return int(cfg[name].num_queries)


def check(name: str, cfg) -> None:
  """Raises UserError (naming the key and its allowed range) if the task cannot be built."""
  if name not in TASKS:
    raise UserError(f'config.tasks: unknown task {name!r}; choose among {", ".join(TASKS)}')
  t, seq_len, vocab = cfg[name], int(cfg.seq_len), int(cfg.vocab_size)

  def need(ok, key, allowed):
    if not ok:
      raise UserError(f'config.{name}.{key}={t[key]} is out of range: {allowed} '
                      f'(seq_len={seq_len}, vocab_size={vocab})')
  if name == 'mqar':
    for key in ('key_vocab', 'value_vocab'):
      need(t[key] >= 1, key, f'{key} >= 1')
    need(1 <= t.num_pairs <= min(t.key_vocab, t.value_vocab), 'num_pairs',
         '1 <= num_pairs <= min(key_vocab, value_vocab)')
    need(1 + 3 * t.num_pairs <= seq_len, 'num_pairs', '1 + 3 * num_pairs <= seq_len')
    for pairs in t.get('more_pairs', ()):
      if not (1 <= pairs <= min(t.key_vocab, t.value_vocab) and 1 + 3 * pairs <= seq_len):
        raise UserError(f'config.mqar.more_pairs has {pairs}, out of range: 1 <= pairs <= '
                        f'min(key_vocab, value_vocab) and 1 + 3 * pairs <= seq_len '
                        f'(seq_len={seq_len})')
  elif name in ('directed', 'induction'):
    need(3 <= t.context_len <= vocab, 'context_len', '3 <= context_len <= vocab_size')
    room = t.context_len - 2 if name == 'directed' else t.context_len - 1
    need(1 <= t.num_queries <= room, 'num_queries',
         f'1 <= num_queries <= context_len - {2 if name == "directed" else 1}')
    per_query = 2 if name == 'directed' else 1
    need(2 + t.context_len + per_query * t.num_queries <= seq_len, 'context_len',
         f'2 + context_len + {per_query} * num_queries <= seq_len')
  elif name == 'mirror':
    need(1 <= t.max_distance and 3 + 2 * t.max_distance <= seq_len, 'max_distance',
         '1 <= max_distance and 3 + 2 * max_distance <= seq_len')
    unknown = set(t.positions) - set(POSITION_ARMS)
    if unknown or not t.positions:
      raise UserError(f'config.mirror.positions={tuple(t.positions)}: choose among '
                      f'{", ".join(POSITION_ARMS)}')
  elif name in POINTER_TASKS:
    # cyclic_nearest draws triples without ties, which needs two distinct distances.
    low = 3 if name == 'cyclic' else 4
    if vocab < low or seq_len < 5:
      raise UserError(f'config.{name} needs vocab_size >= {low} and seq_len >= 5 (CLS, two '
                      f'symbols, SEP, the query); got vocab_size={vocab}, seq_len={seq_len}')
  else:
    need(2 <= t.num_symbols <= vocab, 'num_symbols', '2 <= num_symbols <= vocab_size')
    need(2 <= t.length <= seq_len - 1, 'length', '2 <= length <= seq_len - 1')
    need(0 <= t.margin <= t.length, 'margin', '0 <= margin <= length')


def chance(name: str, cfg) -> float:
  """Accuracy of guessing uniformly among the plausible answers (the context's values)."""
  t = cfg[name]
  if name == 'mqar':
    return 1.0 / int(t.num_pairs)
  if name in ('directed', 'induction'):
    return 1.0 / (int(t.context_len) - 1)
  if name in POINTER_TASKS:
    return 0.5  # One of the two shown symbols.
  return 1.0 / int(t.num_symbols)


def symmetric_ceiling(name: str, config=None) -> float | None:
  """The accuracy a symmetric score reaches at the minimum of the training loss (module
  docstring: 1/2 on `cyclic`, and on mirror's rotary arms); None for tasks without one.
  `name` is a task id (mirror's arms differ)."""
  if name == 'cyclic':
    return 0.5
  if name.startswith('mirror_') and config is not None:
    return 0.5 if position_keys(config, name)['position_embeddings'] == 'rotary' else None
  return None


def symmetric_bound(name: str, config=None) -> float | None:
  """The best accuracy any symmetric score can reach, trained or not (2/3 on `cyclic`; 1/2
  on mirror's rotary arms, where every row is a tie)."""
  if name == 'cyclic':
    return 2.0 / 3.0
  return symmetric_ceiling(name, config) if name.startswith('mirror_') else None


def cyclic_successor(triple, query: int, num_symbols: int) -> int:
  """The first member of `triple` after `query` going round 0..num_symbols-1."""
  return min((y for y in triple if y != query), key=lambda y: (y - query) % num_symbols)


def _distinct(rng, batch: int, population: int, k: int) -> np.ndarray:
  """[batch, k] draws without replacement from range(population), row by row."""
  return np.argsort(rng.random((batch, population)), axis=1)[:, :k]


class _Layout:
  """Empty rows of length seq_len with P prediction slots; tasks fill them in."""

  def __init__(self, batch: int, seq_len: int, slots: int):
    self.ids = np.full((batch, seq_len), PAD, np.int32)
    self.segments = np.zeros((batch, seq_len), np.int32)
    self.positions = np.zeros((batch, slots), np.int32)
    self.labels = np.zeros((batch, slots), np.int32)
    self.weights = np.zeros((batch, slots), np.float32)
    self.kinds = np.zeros((batch, slots), np.int32)
    self.ids[:, 0] = CLS

  def finish(self) -> Batch:
    return Batch(self.ids, self.segments, (self.ids != PAD).astype(np.int32), self.positions,
                 self.labels, self.weights, self.kinds)


def mqar(cfg, rng, batch: int, slots: int) -> Batch:
  t = cfg.mqar
  n, num_keys = int(t.num_pairs), int(t.key_vocab)
  out = _Layout(batch, int(cfg.seq_len), slots)
  keys = _distinct(rng, batch, num_keys, n)
  values = num_keys + _distinct(rng, batch, int(t.value_vocab), n)  # The other symbols.
  out.ids[:, 1:1 + 2 * n:2] = symbol(keys)
  out.ids[:, 2:2 + 2 * n:2] = symbol(values)
  order = _distinct(rng, batch, n, n)                       # Every key again, shuffled.
  rows = np.arange(batch)[:, None]
  query_pos = 1 + 2 * n + np.arange(n)
  out.ids[:, query_pos] = symbol(keys[rows, order])
  out.positions[:, :n] = query_pos
  out.labels[:, :n] = symbol(values[rows, order])
  out.weights[:, :n] = 1.0
  return out.finish()


def _context(cfg, t, rng, batch: int, slots: int):
  length = int(t.context_len)
  out = _Layout(batch, int(cfg.seq_len), slots)
  context = _distinct(rng, batch, int(cfg.vocab_size), length)
  out.ids[:, 1:1 + length] = symbol(context)
  out.ids[:, 1 + length] = SEP
  out.segments[:, 2 + length:] = 1
  return out, context, 2 + length


def induction(cfg, rng, batch: int, slots: int) -> Batch:
  t = cfg.induction
  q = int(t.num_queries)
  out, context, start = _context(cfg, t, rng, batch, slots)
  rows = np.arange(batch)[:, None]
  which = _distinct(rng, batch, int(t.context_len) - 1, q)  # any index with a successor
  query_pos = start + np.arange(q)
  out.ids[:, query_pos] = symbol(context[rows, which])
  out.positions[:, :q] = query_pos
  out.labels[:, :q] = symbol(context[rows, which + 1])
  out.weights[:, :q] = 1.0
  return out.finish()


def directed(cfg, rng, batch: int, slots: int) -> Batch:
  t = cfg.directed
  q = int(t.num_queries)
  out, context, start = _context(cfg, t, rng, batch, slots)
  rows = np.arange(batch)[:, None]
  which = 1 + _distinct(rng, batch, int(t.context_len) - 2, q)  # interior: both neighbours
  before = rng.integers(0, 2, size=(batch, q))               # 0: AFTER x, 1: BEFORE x
  marker_pos = start + 2 * np.arange(q)
  out.ids[:, marker_pos] = np.where(before == 1, BEFORE, AFTER)
  out.ids[:, marker_pos + 1] = symbol(context[rows, which])
  out.positions[:, :q] = marker_pos + 1
  out.labels[:, :q] = symbol(context[rows, which + np.where(before == 1, -1, 1)])
  out.weights[:, :q] = 1.0
  out.kinds[:, :q] = before
  return out.finish()


def majority(cfg, rng, batch: int, slots: int) -> Batch:
  t = cfg.majority
  length, k, margin = int(t.length), int(t.num_symbols), int(t.margin)
  rows = []
  have, tries = 0, 0
  while have < batch:
    tries += 1
    if tries > 1000:
      raise UserError(f'config.majority.margin={margin} is almost never met by {length} '
                      f'uniform draws of {k} symbols; lower it (0 <= margin <= length)')
    draw = rng.integers(0, k, size=(4 * batch, length))
    counts = np.stack([(draw == s).sum(1) for s in range(k)], axis=1)
    top2 = np.sort(counts, axis=1)[:, -2:]
    # margin 0 still needs a unique winner, so that the label is defined.
    ok = (top2[:, 1] - top2[:, 0]) >= max(margin, 1)
    rows.append(draw[ok])
    have += int(ok.sum())
  draw = np.concatenate(rows)[:batch]
  out = _Layout(batch, int(cfg.seq_len), slots)
  out.ids[:, 1:1 + length] = symbol(draw)
  winner = np.argmax(np.stack([(draw == s).sum(1) for s in range(k)], axis=1), axis=1)
  out.positions[:, 0] = 0  # read at CLS
  out.labels[:, 0] = symbol(winner)
  out.weights[:, 0] = 1.0
  return out.finish()


def cyclic_nearest_of(pair, query: int, num_symbols: int) -> int | None:
  """The member of `pair` nearer to `query` round the cycle either way; None on a tie."""
  dist = [min((y - query) % num_symbols, (query - y) % num_symbols) for y in pair]
  return None if dist[0] == dist[1] else pair[int(np.argmin(dist))]


def _pointer_layout(cfg, batch: int, slots: int, shown, query, answer_index) -> Batch:
  """CLS, the two shown symbols, SEP, the query (one segment); the label is the position
  of shown[answer_index]."""
  out = _Layout(batch, int(cfg.seq_len), slots)
  out.ids[:, 1:3] = symbol(shown)
  out.ids[:, 3] = SEP
  out.ids[:, 4] = symbol(query)
  out.positions[:, 0] = 4
  out.labels[:, 0] = 1 + answer_index
  out.weights[:, 0] = 1.0
  return out.finish()


def cyclic(cfg, rng, batch: int, slots: int) -> Batch:
  n = int(cfg.vocab_size)
  triple = _distinct(rng, batch, n, 3)                     # triple[:, 0] is the query.
  query, shown = triple[:, 0], triple[:, 1:]
  ahead = (shown - query[:, None]) % n
  return _pointer_layout(cfg, batch, slots, shown, query, np.argmin(ahead, axis=1))


def cyclic_nearest(cfg, rng, batch: int, slots: int) -> Batch:
  n = int(cfg.vocab_size)
  rows, have = [], 0
  while have < batch:  # Triples whose two shown symbols are at distinct distances.
    triple = _distinct(rng, 2 * batch, n, 3)
    ahead = (triple[:, 1:] - triple[:, :1]) % n
    dist = np.minimum(ahead, n - ahead)
    ok = dist[:, 0] != dist[:, 1]
    rows.append(triple[ok])
    have += int(ok.sum())
  triple = np.concatenate(rows)[:batch]
  ahead = (triple[:, 1:] - triple[:, :1]) % n
  dist = np.minimum(ahead, n - ahead)
  return _pointer_layout(cfg, batch, slots, triple[:, 1:], triple[:, 0],
                         np.argmin(dist, axis=1))


def mirror(cfg, rng, batch: int, slots: int) -> Batch:
  seq_len, far = int(cfg.seq_len), int(cfg.mirror.max_distance)
  out = _Layout(batch, seq_len, slots)
  distance = rng.integers(1, far + 1, size=batch)
  # The query anywhere that leaves both copies inside the row (after CLS).
  query = 1 + distance + (rng.random(batch) * (seq_len - 1 - 2 * distance)).astype(np.int64)
  rows = np.arange(batch)
  x = symbol(rng.integers(0, int(cfg.vocab_size), size=batch))
  for where in (query - distance, query, query + distance):
    out.ids[rows, where] = x
  out.positions[:, 0] = query
  out.labels[:, 0] = query + distance
  out.weights[:, 0] = 1.0
  return out.finish()


GENERATORS = {'mqar': mqar, 'cyclic': cyclic, 'cyclic_nearest': cyclic_nearest,
              'mirror': mirror,
              'directed': directed, 'induction': induction, 'majority': majority}


def generate(name: str, cfg, rng: np.random.Generator, batch: int, slots: int) -> Batch:
  """`batch` rows of task `name`, with `slots` prediction slots (>= its own count)."""
  if slots < num_predictions(name, cfg):
    raise ValueError(f'{name} needs {num_predictions(name, cfg)} prediction slots, got {slots}')
  return GENERATORS[name](cfg, rng, batch, slots)


def describe(row_ids, vocab_names=None) -> str:
  """A row of token ids as text (special names, symbols as s<k>), for reports and tests."""
  parts = []
  for i in np.asarray(row_ids).tolist():
    if i == PAD:
      continue
    parts.append(SPECIAL_NAMES[i] if i < NUM_SPECIAL else f's{i - NUM_SPECIAL}')
  return ' '.join(parts)
