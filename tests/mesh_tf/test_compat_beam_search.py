"""mtf.beam_search.greedy_decode (unrolled) against a NumPy loop, under
several layouts."""

import numpy as np

import mesh_tf as mtf
from tests.layout_harness import check_layouts

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
