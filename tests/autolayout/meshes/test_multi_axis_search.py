"""The search over dims split on several mesh axes (``batch:x+y``): brute
force equals the solver, and plain data parallelism over a whole 2-D slice
is found on the slice's own mesh."""

import itertools
import math

import hypothesis
from hypothesis import strategies as st
import pytest

import autolayout
import costmodels
import mesh_tf as mtf
from autolayout.search import assignments
from tests.autolayout import graphs
from tests.autolayout.search.test_exactness import random_specs


def brute_force(graph, mesh_shape, outputs, max_axes, key):
  """``[(value, rules)]`` over every map of dims to nothing, an axis, or a
  mesh-order tuple of up to ``max_axes`` axes, written here without the
  search's code; layouts the cost model rejects are skipped."""
  mesh_shape = mtf.convert_to_shape(mesh_shape)
  dims = sorted({d.name for t in graph.tensors for d in t.shape})
  axes = [a.name for a in mesh_shape if a.size > 1]
  options = [""] + ["+".join(c) for k in range(1, max_axes + 1)
                    for c in itertools.combinations(axes, k)]
  out = []
  for combo in itertools.product(options, repeat=len(dims)):
    rules = ";".join(f"{d}:{a}" for d, a in zip(dims, combo) if a)
    try:
      r = costmodels.evaluate(graph, mesh_shape, rules, graphs.TOPOLOGY,
                              outputs=outputs)
    except mtf.LayoutError:
      continue
    out.append((key(r), rules))
  return out


KEYS = {"time": lambda r: r.step_time_s, "comm": lambda r: r.comm_time_s,
        "memory": lambda r: r.peak_memory_bytes}


def _check(graph, mesh, outputs, objective="time", max_axes=2):
  key = KEYS[objective]
  res = autolayout.auto_layout(graph, mesh, outputs, graphs.TOPOLOGY,
                               objective=objective, time_limit_s=60,
                               max_axes_per_dim=max_axes)
  assert res.status == "optimal" and res.gap == 0.0
  every = brute_force(graph, mesh, outputs, max_axes, key)
  best = min(v for v, _ in every)
  mine = key(res.report)
  assert math.isclose(mine, best, rel_tol=1e-9, abs_tol=1e-15), (
      f"{objective}: solver {res.rules} gives {mine}, brute force "
      f"{min(every)}")
  assert math.isclose(res.objective_value, mine, rel_tol=1e-12)
  t, c = autolayout.search.solve.table_values(
      autolayout.search.solve.build_problem(graph, mesh, outputs, graphs.TOPOLOGY,
                                     max_axes_per_dim=max_axes),
      res.rules)
  assert math.isclose(t, res.report.step_time_s, rel_tol=1e-9)
  return res, every


def _dp_mlp(batch=65536, d_model=512, d_ff=1024):
  """An MLP training step with a large batch and small weights: splitting
  the batch over every chip is the best plan."""
  from mesh_tf.training import optimize
  from mesh_tf.gradients import gradients
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  b, d, f = (mtf.Dimension("batch", batch), mtf.Dimension("d_model", d_model),
             mtf.Dimension("d_ff", d_ff))
  x = mtf.import_tf_tensor(mesh, None, mtf.Shape([b, d]))
  w1 = mtf.get_variable(mesh, "w1", mtf.Shape([d, f]))
  w2 = mtf.get_variable(mesh, "w2", mtf.Shape([f, d]))
  y = mtf.einsum([mtf.relu(mtf.einsum([x, w1], reduced_dims=[d])), w2],
                 reduced_dims=[f])
  loss = mtf.reduce_mean(mtf.square(y - x))
  grads = gradients([loss], g.trainable_variables)
  optimize.SgdOptimizer(0.1).apply_grads(grads, g.trainable_variables)
  return g, [loss]


def test_space_has_mesh_order_tuples_that_divide():
  g, _ = graphs.mlp(batch=12, d_model=8, d_ff=16)
  space = assignments.dim_space(g, "rows:2;cols:4", max_axes_per_dim=2)
  assert space.options["d_ff"] == ("rows", "cols", ("rows", "cols"))
  assert space.options["batch"] == ("rows", "cols")   # 12 % 8 != 0
  space3 = assignments.dim_space(g, "a:2;b:1;c:2;d:2", max_axes_per_dim=3)
  assert space3.options["d_ff"] == ("a", "c", "d", ("a", "c"), ("a", "d"),
                                    ("c", "d"), ("a", "c", "d"))
  assert assignments.dim_space(g, "rows:2;cols:4").options["d_ff"] == (
      "rows", "cols")
  # Two dims of one tensor never share an axis, even inside a tuple.
  scope = ("batch", "d_model")
  for sigma in assignments.local_assignments(space, scope):
    a, b = (set(assignments.option_axes(o)) for o in sigma)
    assert not a & b


@pytest.mark.parametrize("objective", ["time", "comm", "memory"])
def test_mlp_matches_brute_force_with_multi_axis_dims(objective):
  g, outs = graphs.mlp()
  _check(g, "rows:2;cols:4", outs, objective)


def test_data_parallel_mlp_takes_the_whole_slice_and_matches_brute_force():
  g, outs = _dp_mlp()
  res, every = _check(g, "rows:2;cols:4", outs)
  assert res.rules.mesh_axes_of("batch") == ("rows", "cols"), res.rules
  single = autolayout.auto_layout(g, "rows:2;cols:4", outs, graphs.TOPOLOGY)
  assert res.step_time_s < single.step_time_s
  assert len(every) == 16   # three dims that pairwise share tensors


def test_merged_sums_on_three_axes_match_brute_force():
  g, outs = graphs.merged_sums(n=16, k=64)
  _check(g, "x:2;y:2;z:2", outs, max_axes=3)


@hypothesis.settings(max_examples=25, deadline=None, derandomize=True)
@hypothesis.given(random_specs(), st.sampled_from(["time", "comm", "memory"]))
def test_random_graphs_match_brute_force_with_multi_axis_dims(spec, objective):
  g, outs = graphs.build_random(spec)
  _check(g, "rows:2;cols:4", outs, objective)


@hypothesis.settings(max_examples=10, deadline=None, derandomize=True)
@hypothesis.given(random_specs())
def test_random_training_graphs_match_brute_force_with_multi_axis_dims(spec):
  g, outs = graphs.build_random_training(spec)
  _check(g, "rows:2;cols:4", outs)


def test_forbid_and_exclude_act_on_multi_axis_options():
  g, outs = _dp_mlp()
  res = autolayout.auto_layout(g, "rows:2;cols:4", outs, graphs.TOPOLOGY,
                               max_axes_per_dim=2, forbid="batch:cols")
  assert "cols" not in res.rules.mesh_axes_of("batch")
  search = autolayout.LayoutSearch(g, outs, max_axes_per_dim=2)
  best = search.solve("rows:2;cols:4", graphs.TOPOLOGY)
  other = search.solve("rows:2;cols:4", graphs.TOPOLOGY, exclude=[best.rules])
  assert other.rules != best.rules
  assert other.step_time_s >= best.step_time_s
  with pytest.raises(mtf.InvalidArgumentError, match="max_axes_per_dim"):
    autolayout.auto_layout(g, "rows:2;cols:4", outs, graphs.TOPOLOGY,
                           search=search, max_axes_per_dim=1)
  with pytest.raises(mtf.InvalidArgumentError, match="max_axes_per_dim"):
    autolayout.LayoutSearch(g, outs, max_axes_per_dim=0)


def test_whole_slice_data_parallelism_on_the_slices_own_mesh():
  """On tpu-v5e-16x16, the 2-D mesh x:16;y:16 with multi-axis dims finds
  batch:x+y, which one axis per dim cannot express, and it is no slower
  than data parallelism on the 1-D mesh xy:256."""
  from autolayout.cli.models import load_model
  m = load_model("transformer", {"layers": 1, "batch": 1024}, True)
  topo = "tpu-v5e-16x16"
  flat = autolayout.auto_layout(m.graph, "xy:256", m.outputs, topo,
                                memory_budget=None)
  assert str(flat.rules) == "batch:xy"
  one = autolayout.auto_layout(m.graph, "x:16;y:16", m.outputs, topo,
                               memory_budget=None)
  two = autolayout.auto_layout(m.graph, "x:16;y:16", m.outputs, topo,
                               memory_budget=None, max_axes_per_dim=2)
  assert two.status == "optimal"
  assert two.rules.mesh_axes_of("batch") == ("x", "y"), two.rules
  assert not one.rules.is_multi_axis
  assert two.step_time_s <= flat.step_time_s * (1 + 1e-9)
  assert two.step_time_s < one.step_time_s
  # The answer's rules run through the cost model as written.
  again = costmodels.evaluate(m.graph, "x:16;y:16", str(two.rules), topo,
                              outputs=m.outputs)
  assert math.isclose(again.step_time_s, two.step_time_s, rel_tol=1e-9)


def test_hints_diffs_and_explain_name_multi_axis_rules():
  from autolayout.plans import plan as plan_lib
  from autolayout.plans import diff as plan_diff
  g, outs = _dp_mlp()
  mesh = "rows:2;cols:4"
  plan = plan_lib.make_plan(g, mesh, "batch:rows+cols", graphs.TOPOLOGY,
                            outputs=outs)
  res = autolayout.auto_layout(g, mesh, outs, graphs.TOPOLOGY,
                               max_axes_per_dim=2, hint=plan)
  assert res.rules == plan.rules
  assert res.hint_report.kept == plan.rules and not res.hint_report.skipped
  # Without multi-axis options the hinted rule does not exist there.
  res1 = autolayout.auto_layout(g, mesh, outs, graphs.TOPOLOGY, hint=plan)
  assert [s[0] for s in res1.hint_report.skipped] == ["batch"]
  d = plan_diff.diff_rules(mtf.convert_to_layout_rules("batch:rows"),
                           plan.rules, g, mesh, graphs.TOPOLOGY, outs)
  [row] = d.rows
  assert (row.name, row.a, row.b) == ("batch", "rows", ("rows", "cols"))
  assert plan_diff._show(row.b) == "rows+cols"  # pylint: disable=protected-access
  search = autolayout.LayoutSearch(g, outs, max_axes_per_dim=2)
  table = autolayout.explain(search, mesh, res.rules, graphs.TOPOLOGY,
                             time_limit_s=30)
  [r] = table.to_dict("records")
  assert r["axis"] == "rows+cols"
  assert r["runner_up_axis"] in ("rows", "cols", None)


def test_shift_and_conv_over_several_axes_are_in_the_space():
  # A shift and a convolution's halo exchange move block edges along a
  # dim split over several axes; the search prices those layouts like
  # any other and its answer is the brute-force optimum.
  from mesh_tf.ops import conv as conv_ops
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  h, ci, co = (mtf.Dimension("h", 64), mtf.Dimension("ci", 8),
               mtf.Dimension("co", 8))
  x = mtf.import_tf_tensor(mesh, None, mtf.Shape([h, ci]))
  w = mtf.import_tf_tensor(mesh, None, mtf.Shape(
      [mtf.Dimension("f0", 3), ci, co]))
  y = conv_ops.conv1d(mtf.shift(x, 1, h, wrap=True), w)
  out = mtf.reduce_sum(y * y)
  res, every = _check(g, "rows:2;cols:4", [out])
  assert any("h:rows+cols" in r for _, r in every)
