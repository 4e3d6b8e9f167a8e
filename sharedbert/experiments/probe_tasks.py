"""Synthetic probe tasks for the attention variants, generated on the fly from a seeded RNG.

Every task writes batches of one layout, so that all tasks run through one compiled
program per variant: token ids [B,T] (PAD, CLS, SEP, AFTER, BEFORE, MASK, then the content
symbols 0..vocab_size-1 at ids NUM_SPECIAL...), segment ids (0 for the context, 1 for the
queries), an input mask, and P prediction slots per row: the position to read, the token
id to predict there, a weight (0 for unused slots) and a kind (the directed task's
direction, 0 elsewhere). The model predicts the label token from the encoder's output at
that position (the masked-LM head over the whole vocabulary), so no answer is in the input.

Tasks (configs/probe.py holds their difficulty knobs):
  mqar       multi-query associative recall (Arora et al. 2023, "Zoology"): N key-value
             pairs (2N distinct symbols), then Q of the keys again in random order, each
             followed by a MASK slot; predict each queried key's value in its slot. The
             slot mirrors the context's "key value" layout, as a bidirectional encoder
             sees recall (BERT's masked LM). Zoology draws keys and values from disjoint
             halves of the vocabulary; at this scale that version stalled at "some value
             of the context" for 4,000 steps, so here every symbol is distinct.
  directed   a sequence of L distinct symbols, then Q queries "AFTER x" or "BEFORE x";
             predict the symbol right after (before) x. A pair (a, b) of neighbours needs
             b for "AFTER a" and a for "BEFORE b": the same two tokens, opposite
             directions. A symmetric score can still answer through the absolute position
             embeddings (docs/probe_cpu/tuning.md), so this measures how fast a variant
             learns a direction carried by positions.
  induction  L distinct symbols, then Q of them (not the last) in random order; predict
             the symbol that followed each one's earlier occurrence (an induction head's
             job, "A B ... A -> B", without a causal mask).
  majority   the control: `length` symbols from an alphabet of `num_symbols`, the most
             frequent one ahead of the runner-up by at least `margin`; predict it at CLS.
             Needs attention to pool, but no direction.
  cyclic     direction without positions: the content symbols 0..vocab_size-1 lie on a
             cycle; three distinct ones are shown in random order, then one of them again as
             the query (segment 1); predict, at the query, its successor among the three in
             cyclic order. No symmetric score can do that for every triple: with
             s(x, y) = M[x, y] + h[y] (M symmetric, h a key bias), answering a -> b, b -> c
             and c -> a (a, b, c in cyclic order) needs M_ab + h_b > M_ac + h_c,
             M_bc + h_c > M_ab + h_a and M_ca + h_a > M_bc + h_b, whose sum is 0 > 0. So at
             most 2 of a triple's 3 queries are answered through attention: a ceiling of 2/3
             (`symmetric_ceiling`), which M[x, y] = max(x, y) - min(x, y)/n reaches. The
             bound is on attention's choice only: the query's own embedding (the residual)
             plus the attended set let the FFN and readout name the successor, and measured
             symmetric-score models do pass it (docs/probes.md), so the task does not yet
             isolate symmetric scores.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sharedbert.errors import UserError

PAD, CLS, SEP, AFTER, BEFORE, MASK = range(6)
NUM_SPECIAL = 6
SPECIAL_NAMES = ('PAD', 'CLS', 'SEP', 'AFTER', 'BEFORE', 'MASK')
TASKS = ('mqar', 'directed', 'induction', 'majority', 'cyclic')
DIRECTIONS = ('after', 'before')  # The directed task's kinds, in `kind` order.


def symbol(s):
  """Token id of content symbol s (an int or an array)."""
  return np.asarray(s) + NUM_SPECIAL


def model_vocab_size(vocab_size: int) -> int:
  return NUM_SPECIAL + int(vocab_size)


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


def num_predictions(name: str, cfg) -> int:
  """Prediction slots a task uses per row."""
  if name in ('majority', 'cyclic'):
    return 1
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
    need(1 <= t.num_pairs <= vocab // 2, 'num_pairs', '1 <= num_pairs <= vocab_size // 2')
    need(1 <= t.num_queries <= t.num_pairs, 'num_queries', '1 <= num_queries <= num_pairs')
    need(2 + 2 * t.num_pairs + 2 * t.num_queries <= seq_len, 'num_pairs',
         '2 + 2 * num_pairs + 2 * num_queries <= seq_len')
  elif name in ('directed', 'induction'):
    need(3 <= t.context_len <= vocab, 'context_len', '3 <= context_len <= vocab_size')
    room = t.context_len - 2 if name == 'directed' else t.context_len - 1
    need(1 <= t.num_queries <= room, 'num_queries',
         f'1 <= num_queries <= context_len - {2 if name == "directed" else 1}')
    per_query = 2 if name == 'directed' else 1
    need(2 + t.context_len + per_query * t.num_queries <= seq_len, 'context_len',
         f'2 + context_len + {per_query} * num_queries <= seq_len')
  elif name == 'cyclic':
    if vocab < 3 or seq_len < 6:
      raise UserError(f'config.cyclic needs vocab_size >= 3 and seq_len >= 6 (CLS, three '
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
  if name == 'cyclic':
    return 0.5  # One of the two other symbols.
  return 1.0 / int(t.num_symbols)


def symmetric_ceiling(name: str) -> float | None:
  """The best accuracy a symmetric score can reach through attention (module docstring);
  None for tasks without one."""
  return 2.0 / 3.0 if name == 'cyclic' else None


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
  n, q = int(t.num_pairs), int(t.num_queries)
  out = _Layout(batch, int(cfg.seq_len), slots)
  symbols = _distinct(rng, batch, int(cfg.vocab_size), 2 * n)
  keys, values = symbols[:, :n], symbols[:, n:]
  out.ids[:, 1:1 + 2 * n:2] = symbol(keys)
  out.ids[:, 2:2 + 2 * n:2] = symbol(values)
  sep = 1 + 2 * n
  out.ids[:, sep] = SEP
  which = _distinct(rng, batch, n, q)                       # which pairs are queried
  rows = np.arange(batch)[:, None]
  query_pos = sep + 1 + 2 * np.arange(q)
  out.ids[:, query_pos] = symbol(keys[rows, which])
  out.ids[:, query_pos + 1] = MASK
  out.segments[:, sep + 1:] = 1
  out.positions[:, :q] = query_pos + 1
  out.labels[:, :q] = symbol(values[rows, which])
  out.weights[:, :q] = 1.0
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


def cyclic(cfg, rng, batch: int, slots: int) -> Batch:
  n = int(cfg.vocab_size)
  out = _Layout(batch, int(cfg.seq_len), slots)
  rows = np.arange(batch)
  triple = _distinct(rng, batch, n, 3)
  shown = np.take_along_axis(triple, np.argsort(rng.random((batch, 3)), axis=1), axis=1)
  out.ids[:, 1:4] = symbol(shown)
  out.ids[:, 4] = SEP
  query = triple[rows, rng.integers(0, 3, batch)]
  out.ids[:, 5] = symbol(query)
  out.segments[:, 5:] = 1
  ahead = (triple - query[:, None]) % n
  ahead[ahead == 0] = n                          # The query itself is never its successor.
  out.positions[:, 0] = 5
  out.labels[:, 0] = symbol(triple[rows, np.argmin(ahead, axis=1)])
  out.weights[:, 0] = 1.0
  return out.finish()


GENERATORS = {'mqar': mqar, 'directed': directed, 'induction': induction,
              'majority': majority, 'cyclic': cyclic}


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
