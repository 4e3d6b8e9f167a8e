"""Least-squares fits of a pretrained `standard` model's attention weights (NumPy): onto
`shared` attention (W_s and three diagonals per layer, `fit_shared`), onto `kv_shared`
(per head, the score form and the value path, `fit_kv_shared`) and onto MASA's
cross-layer dictionary (matrix PCA, `fit_atoms`, `fit_masa`), and what a conversion
returns (`Conversion`, `per_layer_conversion`). The variants' conversion hooks call these
(sharedbert/models/attention.py); sharedbert.convert.shared reads and writes the workdirs. The method is described in sharedbert/convert/shared.py."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np

from sharedbert.errors import UserError

ROLES = ('query', 'key', 'value')


@dataclasses.dataclass
class Conversion:
  """A variant's attention fitted to a standard model's (`AttentionBase.from_standard`)."""
  layers: list[dict]    # Each layer's new attention params.
  shared: dict | None   # The encoder's cross-layer params (bert/shared_attention), if any.
  header: list[str]     # The table of reconstruction errors: its header and rows.
  rows: list[list[str]]
  what: str             # What was fitted, for the report.
  errors_of: str = 'kernels'


def per_layer_conversion(layers, fit_layer, error_keys, header, what, errors_of,
                         moments=None) -> Conversion:
  """A Conversion fitted layer by layer: fit_layer(attention) -> (params, errors), one
  table row a layer with the errors of `error_keys`; with `moments` (one per layer: the
  inputs' second moment), fit_layer(attention, input_moment=moments[i]).

  Args:
    layers: each layer's attention params.
    fit_layer: attention -> (params, errors).
    error_keys: the errors the table shows.
    header: the table's header.
    what: what was fitted, in words.
    errors_of: what the errors measure, in words.
    moments: each layer's input moment, or None.
  Returns:
    A Conversion.
  """
  new_layers, rows = [], []
  for i, attention in enumerate(layers):
    fitted, errors = (fit_layer(attention) if moments is None
                      else fit_layer(attention, input_moment=moments[i]))
    new_layers.append(fitted)
    rows.append([str(i)] + [f'{errors[k]:.2e}' for k in error_keys])
  return Conversion(new_layers, None, header, rows, what, errors_of)


def relative_error(target: np.ndarray, fit: np.ndarray) -> float:
  """||target - fit|| / ||target|| (||fit|| when the target is zero).

  Args:
    target, fit: arrays of one shape.
  Returns:
    The relative Frobenius error.
  """
  norm = np.linalg.norm(target)
  return float(np.linalg.norm(target - fit) / norm) if norm else float(np.linalg.norm(fit))


# ---------------------------------------------------------------------------------------
# shared: one layer.

def fit_shared(attention: dict) -> tuple[dict, dict[str, float]]:
  """A standard layer's attention params -> the shared layer's (the rank-1 fit), and
  relative errors.

  Args:
    attention: {'query'|'key'|'value': {'kernel' [D,N,H], 'bias' [N,H]}, 'out': ...}.
  Returns:
    ({'shared': {'kernel', 'bias'}, 'diag' [3,N,H], 'out'}, errors) with errors for 'qkv'
    (the three affine maps together) and each role.
  """
  kernels = np.stack([np.asarray(attention[r]['kernel'], np.float64) for r in ROLES])
  biases = np.stack([np.asarray(attention[r]['bias'], np.float64) for r in ROLES])
  _, d, n, h = kernels.shape
  # One (D+1) x 3 matrix per output unit: rows are inputs and the bias, columns the roles.
  m = np.concatenate([kernels.reshape(3, d, n * h), biases.reshape(3, 1, n * h)], axis=1)
  m = m.transpose(2, 1, 0)  # [N*H, D+1, 3]
  u, s, vt = np.linalg.svd(m, full_matrices=False)
  shared = u[:, :, 0] * s[:, :1]      # [N*H, D+1]
  diag = vt[:, 0, :]                  # [N*H, 3], unit norm
  # Fix the scale (all ones where the roles agree) and the sign (diagonals mostly positive).
  sign = np.where(diag.sum(axis=1) < 0, -1.0, 1.0)[:, None]
  dtype = np.asarray(attention['query']['kernel']).dtype
  # The errors are those of the stored values (after rounding to the parameter dtype).
  diag = (diag * sign * np.sqrt(3.0)).astype(dtype)
  shared = (shared * sign / np.sqrt(3.0)).astype(dtype)
  fit = shared[:, :, None].astype(np.float64) * diag[:, None, :]  # [N*H, D+1, 3]

  errors = {'qkv': relative_error(m, fit)}
  for i, role in enumerate(ROLES):
    errors[role] = relative_error(m[:, :, i], fit[:, :, i])
  out = {
      'shared': {'kernel': shared[:, :d].T.reshape(d, n, h),
                 'bias': shared[:, d].reshape(n, h)},
      'diag': diag.T.reshape(3, n, h),
      'out': copy.deepcopy(attention['out']),
  }
  return out, errors


# ---------------------------------------------------------------------------------------
# kv_shared: one layer, fitted to what attention computes.

def fit_kv_shared(attention: dict) -> tuple[dict, dict[str, float]]:
  """A standard layer's attention params -> kv_shared's (K = V = x W_kv), and errors.

  Per head h attention uses only M1 = [W_q; b_q] W_k^T ((D+1) x D: the score form, the
  query bias included; the key bias adds a constant to each query's scores, which softmax
  ignores) and M2 = W_v W_o (D x D: the value path; the value bias adds b_v W_o to every
  output, since attention weights sum to one, so it moves into b_o). With K = V = x W_kv
  and W_kv = U c (U orthonormal D x H, c > 0), the best W_q', b_q' and W_o' for a given U
  are M1 U / c and U^T M2 / c, leaving the error ||M1 (I - U U^T)||^2 + ||(I - U U^T) M2||^2
  = tr((I - U U^T) G) with G = M1^T M1 + M2 M2^T. The top H eigenvectors of G minimise it
  (exact when G has rank <= H, as for a model already of kv_shared form). c is the free
  scale: chosen so that ||W_kv||_F = sqrt(||W_k||_F ||W_v||_F), the source's own scale.
  Returns errors 'scores' and 'values': ||M - M_fit||_F / ||M||_F over all heads.

  Args:
    attention: a standard layer's attention params (as fit_shared's).
  Returns:
    (kv_shared's attention params, {'scores', 'values'}).
  """
  f64 = lambda a: np.asarray(a, np.float64)
  wq, bq = f64(attention['query']['kernel']), f64(attention['query']['bias'])
  wk, wv = f64(attention['key']['kernel']), f64(attention['value']['kernel'])
  bv = f64(attention['value']['bias'])
  wo, bo = f64(attention['out']['kernel']), f64(attention['out']['bias'])
  d, n, h = wq.shape
  dtype = np.asarray(attention['query']['kernel']).dtype
  new_q, new_kv, new_o = np.zeros((d + 1, n, h)), np.zeros((d, n, h)), np.zeros((n, h, d))
  squares = {'scores': [0.0, 0.0], 'values': [0.0, 0.0]}  # (error, target) sums of squares.
  for head in range(n):
    m1 = np.concatenate([wq[:, head], bq[None, head]]) @ wk[:, head].T   # [D+1, D]
    m2 = wv[:, head] @ wo[head]                                           # [D, D]
    _, vectors = np.linalg.eigh(m1.T @ m1 + m2 @ m2.T)
    u = vectors[:, ::-1][:, :h]                                           # Top H, [D, H].
    scale = np.sqrt(np.linalg.norm(wk[:, head]) * np.linalg.norm(wv[:, head]) / h) or 1.0
    new_kv[:, head] = u * scale
    new_q[:, head] = m1 @ u / scale
    new_o[head] = u.T @ m2 / scale
  new_q, new_kv, new_o = (a.astype(dtype) for a in (new_q, new_kv, new_o))
  # The errors are those of the stored values (after rounding to the parameter dtype).
  for head in range(n):
    m1 = np.concatenate([wq[:, head], bq[None, head]]) @ wk[:, head].T
    m2 = wv[:, head] @ wo[head]
    kv = new_kv[:, head].astype(np.float64)
    for name, target, fit in (('scores', m1, new_q[:, head].astype(np.float64) @ kv.T),
                              ('values', m2, kv @ new_o[head].astype(np.float64))):
      squares[name][0] += float(np.sum((target - fit) ** 2))
      squares[name][1] += float(np.sum(target ** 2))
  errors = {k: float(np.sqrt(e / t)) if t else float(np.sqrt(e)) for k, (e, t) in squares.items()}
  out = {
      'query': {'kernel': new_q[:d], 'bias': new_q[d]},
      'key_value': {'kernel': new_kv, 'bias': np.zeros((n, h), dtype)},
      'out': {'kernel': new_o, 'bias': (bo + np.einsum('nh,nhd->d', bv, wo)).astype(dtype)},
  }
  return out, errors


# ---------------------------------------------------------------------------------------
# shared and symmetric: one layer, fitted to what attention computes (issue 34).

def _augmented(kernel, bias, head):
  """[W; b] of one head: (D+1) x H, the input x extended with a constant 1."""
  return np.concatenate([kernel[:, head], bias[None, head]])


def score_target(wq, bq, wk, bk, head) -> tuple[np.ndarray, np.ndarray]:
  """(T, A) of one head. A = [W_q; b_q][W_k; b_k]^T ((D+1) x (D+1)) is the score form:
  score(x, y) = [x 1] A [y 1]^T. Its last column multiplies the key's constant 1, a term of
  the query alone, which softmax ignores: it is free. T is the symmetric matrix closest to A
  under that freedom: the symmetric part of the D x D block (the antisymmetric part no
  symmetric score can hold), the query-bias row b_q W_k^T kept exactly, mirrored into the
  free column.

  Args:
    wq, bq, wk, bk: the layer's query and key kernels [D, N, H] and biases [N, H].
    head: the head.
  Returns:
    (T, A), (D+1) x (D+1) each.
  """
  a = _augmented(wq, bq, head) @ _augmented(wk, bk, head).T
  d = a.shape[0] - 1
  t = a.copy()
  t[:d, :d] = (a[:d, :d] + a[:d, :d].T) / 2
  t[:d, d] = a[d, :d]
  return t, a


def fit_shared_function(attention: dict, score_weight: float = 1.0,
                        input_moment=None) -> tuple[dict, dict[str, float]]:
  """A standard layer's attention -> shared's (W_s, b_s, d_q, d_k, d_v, W_o, b_o), fitted
  per head to the score form and the value path rather than to the weights.

  Shared's head computes score(x, y) = (x S + b) C (y S + b)^T with C = diag(d_q d_k), S =
  W_s (D x H), b = b_s, and the value path (y S + b) diag(d_v) W_o'. Against the
  symmetrised score form T (`score_target`: its D x D block T0 and its query-bias row r =
  b_q W_k^T) and the value path M2 = W_v W_o (D x D; the value bias b_v W_o is a constant,
  since attention weights sum to one, and moves into b_o):
    1. the span of S: the top H eigenvectors U of G = T0^2/|T0|^2 + M2 M2^T/|M2|^2, which
       minimises |(I-P)T0|^2/|T0|^2 + |(I-P)M2|^2/|M2|^2 over projections P of rank H
       (exact when both lie in an H-dimensional space, as for a model already of shared
       form);
    2. inside the span, the rotation R that diagonalises U^T T0 U = R diag(l) R^T: S = U R
       diag(sqrt|l|), d_q = sign(l), d_k = 1, so S C S^T = (UR) diag(l) (UR)^T, the best
       symmetric fit in that span;
    3. b: least squares on b C S^T = r (the key-dependent term of the query bias);
    4. d_v = 1 and W_o' the least-squares solution of S W_o' = M2; the constant b W_o' and
       b_v W_o move into b_o.
  Errors: 'scores' |A[:, :D] - fit|/|A[:, :D]| (A's key-dependent part) and 'values'
  |M2 - fit|/|M2|, over all heads.

  input_moment: E[[x 1]^T [x 1]] of the layer's inputs on real text ((D+1) x (D+1)), or
  None. Given, the fit is weighted by where the inputs are (`_fit_shared_weighted`).

  Args:
    attention: a standard layer's attention params.
    score_weight: the scores' weight against the values' in the span (step 1).
    input_moment: as above.
  Returns:
    (shared's attention params, {'scores', 'values'}).
  """
  if input_moment is not None:
    return _fit_shared_weighted(attention, np.asarray(input_moment, np.float64), score_weight)
  f64 = lambda x: np.asarray(x, np.float64)
  wq, bq, wk, bk = (f64(attention[r][k]) for r in ('query', 'key') for k in ('kernel', 'bias'))
  wv, bv = f64(attention['value']['kernel']), f64(attention['value']['bias'])
  wo, bo = f64(attention['out']['kernel']), f64(attention['out']['bias'])
  d, n, h = wq.shape
  dtype = np.asarray(attention['query']['kernel']).dtype
  shared = np.zeros((d + 1, n, h))
  diag = np.ones((3, n, h))
  new_o = np.zeros((n, h, d))
  new_bo = bo + np.einsum('nh,nhd->d', bv, wo)
  for head in range(n):
    t, _ = score_target(wq, bq, wk, bk, head)
    t0, r = t[:d, :d], t[d, :d]
    m2 = wv[:, head] @ wo[head]
    g = score_weight * t0 @ t0 / max(np.sum(t0 * t0), 1e-30) + m2 @ m2.T / max(np.sum(m2 * m2), 1e-30)
    u = np.linalg.eigh(g)[1][:, ::-1][:, :h]
    lam, rot = np.linalg.eigh(u.T @ t0 @ u)
    scale = np.sqrt(np.maximum(np.abs(lam), 1e-12 * max(np.abs(lam).max(), 1e-30)))
    s_head = (u @ rot) * scale
    c = np.where(lam < 0, -1.0, 1.0)
    b = np.linalg.lstsq(s_head * c, r, rcond=None)[0]
    x = np.linalg.lstsq(s_head, m2, rcond=None)[0]
    shared[:d, head], shared[d, head], diag[0, head], new_o[head] = s_head, b, c, x
    new_bo -= b @ x
  shared, diag, new_o, new_bo = (a.astype(dtype) for a in (shared, diag, new_o, new_bo))
  out = {'shared': {'kernel': shared[:d], 'bias': shared[d]}, 'diag': diag,
         'out': {'kernel': new_o, 'bias': new_bo}}
  # The errors are those of the stored values (after rounding to the parameter dtype).
  return out, shared_function_errors(attention, out)


def _cholesky(moment) -> np.ndarray:
  """L with L L^T = the moment (slightly regularised: a direction no input takes)."""
  moment = np.asarray(moment, np.float64)
  return np.linalg.cholesky(moment + 1e-6 * np.trace(moment) / len(moment) * np.eye(len(moment)))


def input_moments(hidden_states, lengths) -> list[np.ndarray]:
  """E[[x 1]^T [x 1]] over the real tokens of each layer's input: hidden_states as
  sharedbert.evaluators.sts.hidden_states gives them (the embeddings, then each layer's
  output; layer i's attention reads entry i, post-LN), [n, T, D] each.

  Args:
    hidden_states: [L+1] arrays [n, T, D].
    lengths: [n] real tokens a row.
  Returns:
    One (D+1) x (D+1) moment a layer.
  """
  out = []
  for h in hidden_states[:-1]:
    mask = np.arange(h.shape[1])[None] < np.asarray(lengths)[:, None]
    x = np.asarray(h, np.float64)[mask]
    x = np.concatenate([x, np.ones((len(x), 1))], axis=1)
    out.append(x.T @ x / max(len(x), 1))
  return out


def _fit_shared_weighted(attention: dict, moment: np.ndarray, score_weight: float):
  """`fit_shared_function` weighted by the inputs: with moment = L L^T (Cholesky) and
  [x 1] = u L^T (u white), the score is u (L^T T L) v^T and the value path u L^T M2~
  (M2~ = [W_v; b_v] W_o, the value bias included), so fitting L^T T L and L^T M2~ in the
  Frobenius norm fits the scores and values in expectation over such inputs. The steps are
  `fit_shared_function`'s in those coordinates; then S~ = L^-T S_w, and b_o is kept."""
  f64 = lambda x: np.asarray(x, np.float64)
  wq, bq, wk, bk = (f64(attention[r][k]) for r in ('query', 'key') for k in ('kernel', 'bias'))
  wv, bv = f64(attention['value']['kernel']), f64(attention['value']['bias'])
  wo = f64(attention['out']['kernel'])
  d, n, h = wq.shape
  dtype = np.asarray(attention['query']['kernel']).dtype
  chol = _cholesky(moment)
  shared = np.zeros((d + 1, n, h))
  diag = np.ones((3, n, h))
  new_o = np.zeros((n, h, d))
  for head in range(n):
    t, _ = score_target(wq, bq, wk, bk, head)
    t_w = chol.T @ t @ chol
    m2_w = chol.T @ (_augmented(wv, bv, head) @ wo[head])
    g = (score_weight * t_w @ t_w / max(np.sum(t_w * t_w), 1e-30)
         + m2_w @ m2_w.T / max(np.sum(m2_w * m2_w), 1e-30))
    u = np.linalg.eigh(g)[1][:, ::-1][:, :h]
    lam, rot = np.linalg.eigh(u.T @ t_w @ u)
    scale = np.sqrt(np.maximum(np.abs(lam), 1e-12 * max(np.abs(lam).max(), 1e-30)))
    s_w = (u @ rot) * scale
    shared[:, head] = np.linalg.solve(chol.T, s_w)
    diag[0, head] = np.where(lam < 0, -1.0, 1.0)
    new_o[head] = np.linalg.lstsq(s_w, m2_w, rcond=None)[0]
  shared, diag, new_o = (a.astype(dtype) for a in (shared, diag, new_o))
  out = {'shared': {'kernel': shared[:d], 'bias': shared[d]}, 'diag': diag,
         'out': {'kernel': new_o, 'bias': np.asarray(attention['out']['bias']).copy()}}
  return out, shared_function_errors(attention, out)


def shared_function_errors(attention: dict, fitted: dict) -> dict[str, float]:
  """How far a shared layer `fitted` computes from the standard layer `attention`, per
  head: 'scores' |A[:, :D] - (S~ C S^T)|/|A[:, :D]| (A = [W_q; b_q][W_k; b_k]^T, the part
  that depends on the key; S~ = [W_s; b_s], C = diag(d_q d_k)) and 'values'
  |W_v W_o - W_s diag(d_v) W_o'|/|W_v W_o|, summed over heads. Any shared fit (rank1's
  too) can be scored so.

  Args:
    attention: the standard layer's attention params.
    fitted: the shared layer's.
  Returns:
    {'scores', 'values'}.
  """
  f64 = lambda x: np.asarray(x, np.float64)
  wq, bq, wk, bk = (f64(attention[r][k]) for r in ('query', 'key') for k in ('kernel', 'bias'))
  wv, wo = f64(attention['value']['kernel']), f64(attention['out']['kernel'])
  ws = np.concatenate([f64(fitted['shared']['kernel']), f64(fitted['shared']['bias'])[None]])
  diag, new_o = f64(fitted['diag']), f64(fitted['out']['kernel'])
  d = wq.shape[0]
  squares = {'scores': [0.0, 0.0], 'values': [0.0, 0.0]}
  for head in range(wq.shape[1]):
    _, a = score_target(wq, bq, wk, bk, head)
    s_head = ws[:, head]
    fit_scores = (s_head * diag[0, head] * diag[1, head]) @ s_head[:d].T
    fit_values = (s_head[:d] * diag[2, head]) @ new_o[head]
    for name, target, fit in (('scores', a[:, :d], fit_scores),
                              ('values', wv[:, head] @ wo[head], fit_values)):
      squares[name][0] += float(np.sum((target - fit) ** 2))
      squares[name][1] += float(np.sum(target ** 2))
  return {k: float(np.sqrt(e / t)) if t else float(np.sqrt(e)) for k, (e, t) in squares.items()}


def fit_symmetric_function(attention: dict, input_moment=None) -> tuple[dict, dict[str, float]]:
  """A standard layer's attention -> symmetric's (Q = K = x W_qk + b_qk; values and W_o
  kept), fitted per head to the score form: W_qk W_qk^T is positive semi-definite, so the
  best rank-H fit of the symmetrised block T0 (`score_target`) is its top H positive
  eigenpairs, W_qk = U sqrt(l); then b_qk by least squares on b_qk W_qk^T = r, the query
  bias's key-dependent term. Errors: 'scores' as `fit_shared_function`'s.

  input_moment: as `fit_shared_function`'s; given, the top positive eigenpairs of L^T T L
  (the whole augmented T, bias row included), mapped back by L^-T.

  Args:
    attention: a standard layer's attention params.
    input_moment: as above.
  Returns:
    (symmetric's attention params, {'scores'}).
  """
  f64 = lambda x: np.asarray(x, np.float64)
  wq, bq, wk, bk = (f64(attention[r][k]) for r in ('query', 'key') for k in ('kernel', 'bias'))
  d, n, h = wq.shape
  dtype = np.asarray(attention['query']['kernel']).dtype
  qk = np.zeros((d + 1, n, h))
  chol = None if input_moment is None else _cholesky(input_moment)
  for head in range(n):
    t, _ = score_target(wq, bq, wk, bk, head)
    if chol is not None:
      lam, vec = np.linalg.eigh(chol.T @ t @ chol)
      lam, vec = lam[::-1][:h], vec[:, ::-1][:, :h]
      qk[:, head] = np.linalg.solve(chol.T, vec * np.sqrt(np.maximum(lam, 0.0)))
      continue
    lam, vec = np.linalg.eigh(t[:d, :d])
    lam, vec = lam[::-1][:h], vec[:, ::-1][:, :h]
    w = vec * np.sqrt(np.maximum(lam, 0.0))
    qk[:d, head] = w
    qk[d, head] = np.linalg.lstsq(w, t[d, :d], rcond=None)[0]
  qk = qk.astype(dtype)
  err, total = 0.0, 0.0
  for head in range(n):
    _, a = score_target(wq, bq, wk, bk, head)
    s_head = qk[:, head].astype(np.float64)
    err += float(np.sum((a[:, :d] - s_head @ s_head[:d].T) ** 2))
    total += float(np.sum(a[:, :d] ** 2))
  errors = {'scores': float(np.sqrt(err / total)) if total else float(np.sqrt(err))}
  out = {'query': {'kernel': qk[:d], 'bias': qk[d]},
         'value': copy.deepcopy(attention['value']), 'out': copy.deepcopy(attention['out'])}
  return out, errors


def fit_symmetric_mean(attention: dict) -> tuple[dict, dict[str, float]]:
  """The weight-space baseline for symmetric: W_qk = (W_q + W_k) / 2, b_qk likewise; errors
  of the weights ('query', 'key').

  Args:
    attention: a standard layer's attention params.
  Returns:
    (symmetric's attention params, {'query', 'key'}).
  """
  q, k = attention['query'], attention['key']
  mean = {x: ((np.asarray(q[x], np.float64) + np.asarray(k[x], np.float64)) / 2).astype(
      np.asarray(q[x]).dtype) for x in ('kernel', 'bias')}
  errors = {r: relative_error(np.asarray(attention[r]['kernel'], np.float64), mean['kernel'])
            for r in ('query', 'key')}
  return ({'query': mean, 'value': copy.deepcopy(attention['value']),
           'out': copy.deepcopy(attention['out'])}, errors)


# ---------------------------------------------------------------------------------------
# masa: the stack of layers.

def fit_atoms(matrices: np.ndarray, num_atoms: int) -> tuple[np.ndarray, np.ndarray, list[float]]:
  """Matrix PCA: [L, ...] matrices -> atoms [S, ...], coefficients [L, S], per-layer errors.

  Args:
    matrices: [L, ...] one matrix a layer.
    num_atoms: S.
  Returns:
    (atoms [S, ...], coefficients [L, S], each layer's relative error).
  """
  num_layers = matrices.shape[0]
  if not 1 <= num_atoms <= num_layers:
    raise UserError(f'masa_atoms={num_atoms} must be between 1 and the number of layers '
                    f'({num_layers}) to fit a pretrained stack (S = L is exact)')
  x = matrices.reshape(num_layers, -1).astype(np.float64)
  _, _, vt = np.linalg.svd(x, full_matrices=False)
  basis = vt[:num_atoms]                        # [S, P], orthonormal principal matrices
  coefficients = x @ basis.T                    # [L, S]: projections onto them
  # Atoms at the layers' RMS scale, coefficients of order one.
  scale = np.sqrt(np.mean(np.sum(x ** 2, axis=1))) or 1.0
  atoms = (basis * scale).astype(matrices.dtype)
  coefficients = (coefficients / scale).astype(matrices.dtype)
  # The errors are those of the stored values (after rounding to the parameter dtype).
  fit = coefficients.astype(np.float64) @ atoms
  errors = [relative_error(x[l], fit[l]) for l in range(num_layers)]
  return atoms.reshape(num_atoms, *matrices.shape[1:]), coefficients, errors


def fit_masa(layers: list[dict], num_atoms: int,
             types: dict[str, str]) -> tuple[dict, list[dict], dict]:
  """Standard layers' attention params -> (dictionary, new per-layer attention, errors).

  Args:
    layers: each standard layer's attention params.
    num_atoms: S.
    types: {projection type ('q', ...): its parameter name in a layer ('query', ...)}, the
      types the dictionary holds.
  Returns:
    (dictionary, new per-layer attention params, {type: [each layer's relative error]}).
  """
  dictionary, errors = {}, {}
  new_layers = [copy.deepcopy(a) for a in layers]
  for t, name in types.items():
    stack = np.stack([np.asarray(a[name]['kernel']) for a in layers])
    atoms, coefficients, errors[t] = fit_atoms(stack, num_atoms)
    dictionary[t] = {'atoms': atoms, 'coefficients': coefficients}
    for a in new_layers:
      del a[name]['kernel']  # The layer keeps its bias; the kernel is the dictionary's.
  return dictionary, new_layers, errors
