"""The cost of a dim over several mesh axes: the prediction equals the real
lowering, and each collective over the axes is priced on the links of the
physical dimensions those axes cover (as one axis of the same size is)."""

import math

import pytest

import costmodels as cm
from tests.costmodels import graphs
from tests.costmodels.test_evaluate import (_trained_mlp,
                                            assert_prediction_matches_lowering,
                                            build)

CASES = [
    (graphs.mlp, "rows:2;cols:4", "batch:rows+cols"),
    (graphs.mlp, "rows:2;cols:4", "batch:cols+rows"),
    (graphs.mlp, "rows:2;cols:4", "d_ff:rows+cols"),
    (graphs.attention, "rows:2;cols:4", "batch:rows;memory:cols"),
    (graphs.attention, "a:2;b:2;c:2", "batch:a+b;heads:c"),
    (graphs.einsum_chain, "rows:2;cols:4", "k:cols+rows"),
]


@pytest.mark.parametrize("fn,mesh_shape,layout", CASES)
def test_prediction_equals_the_real_lowering_with_multi_axis_dims(
    fn, mesh_shape, layout):
  g, mesh, outputs = build(fn)
  topology = "tpu-v4-2x2x2" if mesh_shape.count(":") == 3 else "tpu-v5e-2x4"
  report, impl = assert_prediction_matches_lowering(
      g, mesh, mesh_shape, layout, outputs, topology)
  multi = [c for c in impl.trace.collectives if len(c.mesh_axes) > 1]
  if "+" in layout and fn is not graphs.attention:
    assert multi, "a multi-axis split of a reduced dim communicates"


def test_training_step_with_a_multi_axis_batch_prices_like_one_axis():
  g, mesh, loss = _trained_mlp()
  report, impl = assert_prediction_matches_lowering(
      g, mesh, "rows:2;cols:4", "batch:rows+cols", [loss], "tpu-v5e-2x4")
  one = cm.evaluate(g, "x:8", "batch:x", "tpu-v5e-2x4", outputs=[loss])
  # Same groups of 8 chips on the same torus links: the same prices.
  assert len(report.collectives) == len(one.collectives)
  assert {c.group_size for c in report.collectives} == {8}
  for c, d in zip(report.collectives, one.collectives):
    assert (c.kind, c.bytes_per_device) == (d.kind, d.bytes_per_device)
    assert math.isclose(c.time_s, d.time_s, rel_tol=1e-12)
  assert math.isclose(report.total_comm_time_s, one.total_comm_time_s,
                      rel_tol=1e-12)
  # (The exposed figure may differ slightly: the overlap model schedules
  # communication per mesh axis, and here the time is split over two.)
  # Each gradient all-reduce is split between the two axes it spans.
  for c in report.collectives:
    assert set(c.mesh_axes) == {"rows", "cols"}
    assert set(dict(c.time_by_axis)) == {"rows", "cols"}
