"""Repeated blocks are found by structure, not names: a hand-written
Transformer (its own names, mtf.layers and raw einsums, SGD) costs the
search the same work at any depth, and its tables stay small."""

import os
import sys

import autolayout
import costmodels
from autolayout.search import assignments, tables
from autolayout.search.pricing import Pricer
from mesh_tf.core.mesh_shape import convert_to_mesh_shape

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))
from benchmarks import handwritten  # noqa: E402  pylint: disable=g-import-not-at-top
from tests.autolayout import graphs  # noqa: E402

SIZES = dict(d_model=256, heads=4, d_kv=64, d_ff=1024, vocab=4096,
             length=128, batch=16)
MESH = convert_to_mesh_shape("data:2;model:4")


def _tables(layers):
  g, outs = handwritten.build(layers, **SIZES)
  space = assignments.dim_space(g, MESH)
  topo = costmodels.get_topology("dgx-h100")
  return g, outs, tables.GraphTables(g, MESH, outs, Pricer(topo, MESH),
                                     space)


def test_work_does_not_grow_with_depth():
  _, _, t3 = _tables(3)
  _, _, t9 = _tables(9)
  assert len(set(t3.op_key.values())) == len(set(t9.op_key.values()))
  assert [(f.kind, f.scope) for f in t3.factors] == [
      (f.kind, f.scope) for f in t9.factors]
  # Factor counts grow with depth: repeated layers share one factor.
  assert sum(f.count for f in t9.factors) > sum(f.count for f in t3.factors)


def test_pending_chains_do_not_merge_the_network_into_one_scope():
  g, _, t = _tables(3)
  dims = {d.name for x in g.tensors for d in x.shape}
  assert len(dims) == 8
  # The residual stream starts as a pending sum (the one-hot embedding
  # einsum) and stays pending through the first add; its consumers see the
  # dims its state depends on, not every dim upstream.
  assert max(len(f.scope) for f in t.factors) <= 7
  assert "keys" not in t.pend_scope[next(
      x for x in g.tensors if x.name.startswith("model/embed"))]


def test_hand_written_solve_is_exact():
  g, outs = handwritten.build(2, **SIZES)
  r = autolayout.auto_layout(g, "data:2;model:4", outs, "dgx-h100")
  assert r.status == "optimal"
  assert r.objective_value == r.report.step_time_s


def test_narrowed_factors_price_as_their_whole_scope():
  # The layer norm gradient that reads the residual stream (pending over
  # tokens, heads and head_dim) and the MLP's gradient (pending over
  # hidden) used to price all 7 of those dims in one table of 141 choices;
  # its cost depends on its own dims only, so its factor says so.
  g, _, t = _tables(2)
  assert max(len(f.scope) for f in t.factors) <= 6
  narrowed = [f for f in t.factors
              if f.kind == "op" and f.scope != t._key_scope[f.key]]  # pylint: disable=protected-access
  assert narrowed
  for f in narrowed:
    whole = t._key_scope[f.key]  # pylint: disable=protected-access
    for sigma, o in t._table(f.key).items():  # pylint: disable=protected-access
      v = t.value(f, assignments.restrict(whole, sigma, f.scope))
      assert v == ((o.valid, o.compute_s, o.comm_s) if o.valid
                   else (False,) + v[1:])


def test_hand_written_solver_matches_brute_force():
  g, outs = handwritten.build(1, d_model=16, heads=2, d_kv=4, d_ff=32,
                              vocab=32, length=8, batch=4)
  # Narrowed factors, the first guess and its complete hint: the same
  # optimum as every layout priced by the cost model.
  graphs.assert_solver_matches_brute_force(g, "x:2;y:4", outs, "time", True)
