"""The per-op cost tables (autolayout.search.tables), through their public surface
only (``GraphTables(...)``, ``.factors``, ``.value``): their sum under any
layout is the cost model's step and communication time, repeated layers
share a factor, and a pending sum costs an all-reduce only when forced."""

import math

import pytest

import costmodels
import mesh_tf as mtf
from autolayout.search import assignments, tables
from autolayout.search.pricing import Pricer
from tests.autolayout import graphs


def _tables(g, mesh, outs):
  space = assignments.dim_space(g, mesh)
  return tables.GraphTables(g, space.mesh_shape, outs,
                            Pricer(costmodels.get_topology(graphs.TOPOLOGY),
                                   space.mesh_shape),
                            space), space


def _sum(gt, rules):
  t = c = 0.0
  for f in gt.factors:
    valid, compute_s, comm_s = gt.value(f, assignments.from_rules(f.scope,
                                                                  rules))
    assert valid, (f, rules)
    t += f.count * (compute_s + comm_s)
    c += f.count * comm_s
  return t, c


@pytest.mark.parametrize("make", [graphs.mlp, graphs.merged_sums])
@pytest.mark.parametrize("mesh", ["rows:2;cols:4", "x:2;y:2;z:2"])
def test_factor_sums_equal_the_cost_model_under_every_layout(make, mesh):
  g, outs = make()
  gt, space = _tables(g, mesh, outs)
  assert all(set(f.scope) <= set(space.dims) for f in gt.factors)
  for rules in assignments.all_layouts(g, mesh):
    t, c = _sum(gt, rules)
    r = costmodels.evaluate(g, mesh, rules, graphs.TOPOLOGY, outputs=outs)
    assert math.isclose(t, r.step_time_s, rel_tol=1e-9), str(rules)
    assert math.isclose(c, r.comm_time_s, rel_tol=1e-9, abs_tol=1e-18)


def _layers(n):
  """``n`` identical relu(x w_i) layers."""
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.get_variable(mesh, "x", "batch:64,d:128", trainable=False)
  for i in range(n):
    w = mtf.get_variable(mesh, f"w{i}", "d:128,e:128")
    x = mtf.rename_dimension(mtf.relu(mtf.einsum([x, w], reduced_dims=[
        x.shape.get_dim_by_name("d")])), "e", "d")
  return g, [mtf.reduce_sum(x)]


def test_repeated_layers_share_factors_and_count_them():
  g1, o1 = _layers(1)
  g3, o3 = _layers(3)
  gt1, _ = _tables(g1, "x:2;y:4", o1)
  gt3, _ = _tables(g3, "x:2;y:4", o3)
  # Depth changes the counts, not the number of distinct factors.
  assert len(gt3.factors) == len(gt1.factors)
  assert sum(f.count for f in gt3.factors) > sum(f.count
                                                 for f in gt1.factors)


def _pending(force):
  """y = x w summed over k; exported directly, or exp'd (which forces the
  pending sum) first."""
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.get_variable(mesh, "x", "a:64,k:256")
  w = mtf.get_variable(mesh, "w", "k:256,c:64")
  y = mtf.einsum([x, w], reduced_dims=[x.shape.get_dim_by_name("k")])
  return g, [mtf.exp(y) if force else y]


@pytest.mark.parametrize("force", [False, True])
def test_a_pending_sum_is_priced_once_by_its_all_reduce_factor(force):
  g, outs = _pending(force)
  gt, _ = _tables(g, "x:8", outs)
  split_k = mtf.LayoutRules([("k", "x")])
  ar = [f for f in gt.factors if f.kind == "allreduce"]
  assert ar, gt.factors
  comm = sum(f.count * gt.value(f, assignments.from_rules(f.scope,
                                                          split_k))[2]
             for f in ar)
  # Exported outputs are forced too: either way, one all-reduce of y.
  assert comm > 0
  # Replicated k: nothing is pending, so the factor costs nothing.
  assert all(gt.value(f, assignments.from_rules(f.scope, mtf.LayoutRules()))
             == (True, 0.0, 0.0) for f in ar)
  r = costmodels.evaluate(g, "x:8", split_k, graphs.TOPOLOGY, outputs=outs)
  assert math.isclose(_sum(gt, split_k)[1], r.comm_time_s, rel_tol=1e-9)
