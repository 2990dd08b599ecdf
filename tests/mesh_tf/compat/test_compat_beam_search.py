"""mtf.beam_search.greedy_decode (unrolled) against a NumPy loop, under
several layouts."""

import numpy as np

import mesh_tf as mtf
from tests.layout_harness import check_layouts, run

V, L = 8, 6
NEXT = np.array([3, 2, 6, 5, 7, 4, 1, 3])  # next token of each token
PROMPTS = np.array([[5, 0, 0, 0, 0, 0], [2, 3, 0, 0, 0, 0],
                    [4, 0, 0, 0, 0, 0], [7, 0, 0, 0, 0, 0]], np.int32)


def _logits_fn(step_num, ids, states):
  """Logits that make NEXT[previous id] the best token; counts calls."""
  length = ids.shape.dims[-1]
  vocab = mtf.Dimension("vocab", V)
  prev_pos = mtf.one_hot(step_num - 1, length, dtype="int32")
  prev = mtf.reduce_sum(ids * prev_pos, reduced_dim=length)
  table = mtf.import_tf_tensor(ids.mesh, NEXT.astype(np.int32), "tok:8")
  nxt = mtf.gather(table, prev, mtf.Dimension("tok", 8))
  logits = mtf.one_hot(nxt, vocab) * 10.0
  return logits, [states[0] + 1]


def _reference(eos_id):
  ids = PROMPTS.copy()
  for t in range(L):
    if t > 0 and (ids == eos_id).any(axis=1).all():
      break
    prev = ids[:, t - 1] if t > 0 else np.zeros(len(ids), np.int32)
    new = NEXT[prev]
    ids[:, t] = np.where(ids[:, t] == 0, new, ids[:, t])
  return ids


def _build(eos_id):
  def build(mesh):
    initial = mtf.import_tf_tensor(mesh, PROMPTS, "batch:4;length:6")
    count = mtf.zeros(mesh, "", dtype="int32")
    out = mtf.beam_search.greedy_decode(_logits_fn, initial,
                                        initial_states=[count],
                                        eos_id=eos_id)
    return out
  return build


def test_greedy_decode_matches_numpy():
  ref = _reference(eos_id=99)
  assert (ref != 0).all()
  check_layouts(_build(99), ["batch:4", "vocab:8"], lambda: ref,
                meshes=["x:2", "rows:2;cols:4"], limit=5)


def test_greedy_decode_stops_when_every_sequence_has_eos():
  ref = _reference(eos_id=3)
  assert (ref == 0).any()  # the loop stopped before the end
  check_layouts(_build(3), ["batch:4"], lambda: ref, meshes=["x:2"])


BV, BL = 4, 3
TABLE = np.random.RandomState(7).randn(BV + 1, BV).astype(np.float32)


def _markov_logits_fn(step_num, ids, states):
  """Logits of the next token: a row of TABLE chosen by the previous token
  (row BV at position 0)."""
  length = ids.shape.dims[-1]
  prev_pos = mtf.one_hot(step_num - 1, length, dtype="int32")
  prev = mtf.reduce_sum(ids * prev_pos, reduced_dim=length)
  start = mtf.cast(mtf.equal(step_num, 0), "int32") * BV
  prev = prev + start
  table = mtf.import_tf_tensor(ids.mesh, TABLE, f"prev:{BV + 1};vocab:{BV}")
  return mtf.gather(table, prev, mtf.Dimension("prev", BV + 1)), states


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _all_sequences():
  seqs = np.array(np.meshgrid(*[range(BV)] * BL, indexing="ij")).reshape(
      BL, -1).T
  lp = _log_softmax(TABLE)
  scores = np.zeros(len(seqs))
  for t in range(BL):
    prev = seqs[:, t - 1] if t else np.full(len(seqs), BV)
    scores += lp[prev, seqs[:, t]]
  return seqs, scores


def test_a_wide_beam_finds_the_exhaustive_best_sequences():
  beams = BV ** (BL - 1)  # wide enough to be exact

  def build(mesh):
    initial = mtf.zeros(mesh, f"batch:2;beam:{beams};length:{BL}",
                        dtype="int32")
    return list(mtf.beam_search.beam_search(_markov_logits_fn, initial,
                                            alpha=0.0, eos_id=99))
  seqs, scores = _all_sequences()
  order = np.argsort(-scores, kind="stable")[:beams]
  ref_ids = np.broadcast_to(seqs[order], (2, beams, BL))
  ref_scores = np.broadcast_to(scores[order], (2, beams))
  check_layouts(build, ["batch:2", "beam:16"],
                lambda: [ref_ids, ref_scores], meshes=["x:2", "x:8"],
                rtol=1e-5, atol=1e-5)


def test_eos_finishes_hypotheses_with_the_length_penalty():
  # With eos = token 0, ended hypotheses compete by length-normalised score;
  # the answer is the exhaustive best over all sequences that end in eos
  # (or run to the full length), scored with T2T's penalty.
  alpha, eos, beams = 0.6, 0, BV ** (BL - 1)

  def build(mesh):
    initial = mtf.zeros(mesh, f"batch:1;beam:{beams};length:{BL}",
                        dtype="int32")
    ids, scores = mtf.beam_search.beam_search(
        _markov_logits_fn, initial, alpha=alpha, eos_id=eos,
        stop_early=False)
    return [ids, scores]
  lp = _log_softmax(TABLE)
  best = {}
  seqs, _ = _all_sequences()
  for s in seqs:
    total, prev = 0.0, BV
    for t, tok in enumerate(s):
      total += lp[prev, tok]
      prev = tok
      if tok == eos:
        score = total / ((5.0 + t + 1) / 6.0) ** alpha
        key = tuple(s[:t + 1]) + (0,) * (BL - t - 1)
        best[key] = score
        break
  top = sorted(best.items(), key=lambda kv: -kv[1])[0]
  (ids, scores), _ = run(build, "x:2", "beam:x")
  np.testing.assert_array_equal(ids[0, 0], top[0])
  np.testing.assert_allclose(scores[0, 0], top[1], rtol=1e-5)
  assert (scores[0, 1:] <= scores[0, 0] + 1e-6).all()
  check_layouts(build, ["beam:16"], meshes=["x:2", "rows:2;cols:4"])


def test_compute_topk_scores_and_seq():
  seq = np.arange(24, dtype=np.int32).reshape(1, 4, 6)
  sc = np.array([[0.1, 0.9, 0.5, 0.7]], np.float32)

  def build(mesh):
    s = mtf.import_tf_tensor(mesh, seq, "b:1;old:4;length:6")
    scores = mtf.import_tf_tensor(mesh, sc, "b:1;old:4")
    flags = mtf.greater(scores, 0.6)
    out = mtf.beam_search.compute_topk_scores_and_seq(
        s, scores, scores * 2.0, flags, mtf.Dimension("beam", 2),
        states=[scores])
    return [out[0], out[1], mtf.cast(out[2], "int32"), out[3][0]]
  check_layouts(build, ["old:4", "length:6"],
                lambda: [seq[:, [1, 3]], 2 * sc[:, [1, 3]], [[1, 1]],
                         sc[:, [1, 3]]], meshes=["x:2"])
