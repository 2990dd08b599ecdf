"""Every layout the search returns lowers on 8 logical CPU devices and gives
the single-device result."""

import numpy as np
import pytest

import autolayout
import mesh_tf as mtf
from mesh_tf.models.transformer import transformer_lm
from tests.autolayout import graphs


def _lower(graph, outputs, mesh_shape, rules, feeds=None):
  mesh = graph.operations[0].mesh
  n = mtf.convert_to_shape(mesh_shape).size
  impl = mtf.PlacementMeshImpl(mesh_shape, rules, mtf.logical_cpu_devices(n))
  lowering = mtf.Lowering(graph, {mesh: impl}, feeds=feeds)
  return [lowering.export_to_tf_tensor(t).numpy() for t in outputs]


def _check(graph, outputs, results, feeds=None, rtol=1e-4):
  base = _lower(graph, outputs, "all:1", "", feeds)
  assert any(len(r.rules) >= 2 for r in results), [str(r.rules)
                                                   for r in results]
  for r in results:
    vals = _lower(graph, outputs, r.mesh_shape, r.rules, feeds)
    for v, b in zip(vals, base):
      np.testing.assert_allclose(v, b, rtol=rtol, atol=1e-3,
                                 err_msg=f"{r.mesh_shape} {r.rules}")


def test_mlp_pareto_layouts_run_and_match_one_device():
  g, outs = graphs.mlp(batch=64, d_model=128, d_ff=512)
  results, _ = autolayout.pareto(g, "rows:2;cols:4", outs, graphs.TOPOLOGY)
  results.append(autolayout.auto_layout(g, "x:2;y:2;z:2", outs,
                                        graphs.TOPOLOGY, objective="memory"))
  _check(g, outs, results, rtol=1e-3)


def test_merged_sums_layouts_run_and_match_one_device():
  g, outs = graphs.merged_sums(n=32, k=64)
  results = [autolayout.auto_layout(g, m, outs, graphs.TOPOLOGY,
                                    objective=o)
             for m in ("rows:2;cols:4", "x:2;y:2;z:2")
             for o in ("memory", "comm")]
  _check(g, outs, results)


@pytest.mark.parametrize("mesh", ["data:2;model:4", "x:2;y:2;z:2"])
def test_zoo_transformer_layouts_run_and_match_one_device(mesh):
  m = transformer_lm(layers=1, d_model=16, heads=4, d_kv=4, d_ff=32,
                     vocab=64, length=8, batch=8)
  feeds = m.random_feeds(seed=1)
  results = [autolayout.auto_layout(m.graph, mesh, [m.loss], "dgx-h100",
                                    objective="memory")]
  _check(m.graph, [m.loss], results, feeds=feeds)
