"""Memory inside mtf.while_loop: the carried tensors live through the loop,
the body's temporaries peak once per iteration (whatever the trip count),
against hand computations of small graphs; the predicted bytes of the body's
tensors equal the slices the lowering makes; and the layout optimizer prices
loops exactly as the cost model does."""

import numpy as np
import pytest

import costmodels as cm
import mesh_tf as mtf
from costmodels import memory
from tests.costmodels.test_evaluate import _slice_bytes, lower_for_real

# Every float tensor of these graphs is b:8;d:16 float32: 512 bytes whole,
# 256 per device on "rows:2" with "b:rows".  Counters are int32 (4 bytes),
# conditions bool (1 byte).
MESH, RULES, X = "rows:2", "b:rows", 256


def _simple(trips=3, read_init_after=False, accumulate=False):
  """x <- x * 2 + 1 (and, accumulating, sum of x * 2 * 3)."""
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x0 = mtf.zeros(mesh, "b:8;d:16")
  i0 = mtf.constant(mesh, 0, dtype="int32")

  def body(i, x):
    h = x * 2.0
    y = h + 1.0
    out = [y]
    if accumulate:
      out.append(h * 3.0)
    return [i + 1] + out[:1] + out[1:]
  outs = mtf.while_loop(lambda i, x: mtf.less(i, trips), body, [i0, x0],
                        has_accumulators=accumulate)
  if not accumulate:
    mtf.reduce_sum(outs[1])
  if read_init_after:
    mtf.reduce_sum(x0)
  loop = outs[0].operation
  return g, loop


def _profile(g, mesh_shape=MESH, rules=RULES):
  # Build order, so that the hand computation knows the steps.
  return memory.memory_profile(g, mesh_shape, rules,
                               schedule_ops=list(g.operations))


def test_the_body_peaks_on_top_of_the_carried_tensors():
  g, loop = _simple()
  assert [op.kind for op in loop.cond_operations] == ["less"]
  assert len(loop.body_operations) == 3        # h, y, i + 1
  prof = _profile(g)
  # Steps: x0 | i0 | less | h | y | i+1 | reduce_sum.  The carried i, x
  # (4 + 256) live from the loop's first step; x0 dies into the first
  # iteration's x; h lives until y reads it; y (the next x) to the end of
  # the iteration.
  carried = 4 + X
  assert list(prof.bytes_by_step) == [
      X, X + 4, carried + 1, carried + X, carried + 2 * X, carried + X + 4,
      X + 4 + 4]
  assert prof.peak_bytes == 772 and prof.peak_step == 4
  assert prof.peak_op is loop.body_operations[1]
  assert prof.breakdown["activations"] == 772
  # Unsplit, every float tensor is 512 bytes.
  assert _profile(g, "x:1", "").peak_bytes == 4 + 3 * 512


def test_the_peak_does_not_grow_with_the_trip_count():
  peaks = {trips: _profile(_simple(trips)[0]).peak_bytes
           for trips in (1, 3, 50)}
  assert peaks == {1: 772, 3: 772, 50: 772}


def test_an_initial_value_read_after_the_loop_keeps_its_buffer():
  g, _ = _simple(read_init_after=True)
  prof = _profile(g)
  assert prof.peak_bytes == 772 + X and prof.peak_step == 4


def test_accumulators_are_carried_and_the_new_sum_is_counted():
  g, loop = _simple(accumulate=True)
  prof = _profile(g)
  # Steps: x0 | i0 | less | h | y | h*3 | i+1 | accumulate.  Carried: i, x
  # and the sum (4 + 2X); at the accumulate step the body's outputs (next
  # x, the term, i + 1) and the new sum are live.
  carried = 4 + 2 * X
  assert list(prof.bytes_by_step) == [
      X, X + 4, carried + 1, carried + X, carried + 2 * X, carried + 3 * X,
      carried + 2 * X + 4, carried + 3 * X + 4]
  assert prof.peak_bytes == 1288 and prof.peak_op is loop
  assert len(loop.accumulator_sums) == 1


def test_a_nested_loop_peaks_inside_the_outer_iteration():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x0 = mtf.zeros(mesh, "b:8;d:16")
  i0 = mtf.constant(mesh, 0, dtype="int32")

  def outer_body(i, x):
    k0 = mtf.constant(mesh, 0, dtype="int32")
    _, z = mtf.while_loop(lambda k, z: mtf.less(k, 3),
                          lambda k, z: [k + 1, z * 2.0], [k0, x])
    return [i + 1, z + 1.0]
  i, x = mtf.while_loop(lambda i, x: mtf.less(i, 2), outer_body, [i0, x0])
  inner = x.operation.body_operations[1]
  prof = _profile(g)
  # Steps (build order; a body's return list builds left to right):
  # x0 | i0 | less i | k0 | less k | k+1 | z*2 | i+1 | z+1.
  # Outer carried i, x (4 + X); inner carried k, z (4 + X) from its first
  # step; k+1 and z*2 (the inner next values) to the end of the inner
  # iteration; the inner loop's z until z + 1 reads it.
  outer = 4 + X
  assert list(prof.bytes_by_step) == [
      X, X + 4, outer + 1, outer + 4, outer + 4 + X + 1,
      outer + 4 + X + 4, outer + 4 + 2 * X + 4, outer + X + 4,
      outer + 2 * X + 4]
  assert prof.peak_bytes == 780
  assert prof.peak_op is inner.body_operations[1]


def test_liveness_plans_and_memory_steps_agree():
  g, loop = _simple(accumulate=True)
  plan = memory.liveness(g)
  assert len(plan.schedule) == len(g.operations)
  assert plan.step_ops == tuple(memory.memory_steps(plan.schedule))
  # The loop: less, h, y, h * 3, i + 1, accumulate.
  assert len(plan.step_ops) == len(g.operations) - 1 + 6
  assert {t: (a, b) for t, a, b in plan.intervals} == memory.live_intervals(
      g, plan.schedule)
  sets = memory.live_sets(g, plan.schedule)
  assert len(sets) == len(plan.step_ops)
  # The default schedule finds the same peak as the build order here.
  assert memory.memory_profile(g, MESH, RULES).peak_bytes == 1288


@pytest.mark.parametrize("mesh_shape,layout", [
    ("rows:2;cols:4", "b:rows;d:cols"), ("x:8", "b:x"),
    ("rows:2;cols:2", "d:rows;e:cols")])
def test_body_tensor_bytes_equal_the_lowered_slices(mesh_shape, layout):
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  rng = np.random.RandomState(0)
  x0 = mtf.import_tf_tensor(mesh, rng.randn(8, 16).astype(np.float32),
                            "b:8;d:16")
  w = mtf.import_tf_tensor(mesh, rng.randn(16, 4).astype(np.float32),
                           "d:16;e:4")
  i0 = mtf.constant(mesh, 0, dtype="int32")

  def body(i, x):
    h = mtf.einsum([x, w], output_shape="b:8;e:4")
    y = mtf.einsum([mtf.tanh(h), w], output_shape="b:8;d:16")
    return [i + 1, y, h]
  outs = mtf.while_loop(lambda i, x: mtf.less(i, 2), body, [i0, x0],
                        has_accumulators=True)
  loop = outs[0].operation
  _, lowering = lower_for_real(g, mesh, mesh_shape, layout, outs)
  inner = [t for op in loop.cond_operations + loop.body_operations
           for t in op.outputs]
  assert len(inner) == 5
  for t in inner:
    assert memory.tensor_bytes_per_device(t, mesh_shape, layout) == (
        _slice_bytes(lowering.tensors[t])), t.name
  prof = memory.memory_profile(g, mesh_shape, layout, outputs=outs)
  for t in inner + loop.accumulator_sums:
    assert t in prof.tensor_bytes


def _big_body_graph():
  """A loop whose body makes a [b, f] temporary 16x its carried x."""
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x0 = mtf.zeros(mesh, "b:8;d:16")
  w = mtf.get_variable(mesh, "w", "d:16;f:256")
  i0 = mtf.constant(mesh, 0, dtype="int32")

  def body(i, x):
    h = mtf.relu(mtf.einsum([x, w], output_shape="b:8;f:256"))
    return [i + 1, mtf.einsum([h, w], output_shape="b:8;d:16")]
  mtf.while_loop(lambda i, x: mtf.less(i, 4), body, [i0, x0])
  return g


def test_auto_layout_prices_the_body_peak_as_the_cost_model():
  g = _big_body_graph()
  free = mtf.auto_layout(g, "x:8", topology="dgx-h100")
  replicated = cm.evaluate(g, "x:8", "", "dgx-h100").peak_memory_bytes
  # The body's two [b, f] tensors (8 KiB each, whole) dominate.
  assert replicated >= 2 * 8 * 256 * 4
  budget = replicated - 1
  fit = mtf.auto_layout(g, "x:8", topology="dgx-h100", memory_budget=budget)
  peak = cm.evaluate(g, "x:8", fit.rules, "dgx-h100").peak_memory_bytes
  assert peak == fit.report.peak_memory_bytes <= budget
  assert free.report.peak_memory_bytes == cm.evaluate(
      g, "x:8", free.rules, "dgx-h100").peak_memory_bytes
  with pytest.raises(mtf.MtfError, match="no layout"):
    mtf.auto_layout(g, "x:8", topology="dgx-h100", memory_budget=2048)


def test_auto_layout_splits_a_dim_only_the_body_has(tmp_path):
  # z exists only inside the body: its [b, p, z] temporaries dominate, and
  # only splitting z fits half of the replicated peak.
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x0 = mtf.zeros(mesh, "b:2;d:16")
  i0 = mtf.constant(mesh, 0, dtype="int32")

  def body(i, x):
    r = mtf.reshape(x, "b:2;p:4;q:4")
    h = mtf.einsum([r, mtf.ones(mesh, "q:4;z:512")],
                   output_shape="b:2;p:4;z:512")
    y = mtf.reduce_sum(mtf.tanh(h), reduced_dim=mtf.Dimension("z", 512))
    return [i + 1, mtf.reshape(mtf.concat([y, y, y, y], "p"), "b:2;d:16")]
  mtf.while_loop(lambda i, x: mtf.less(i, 4), body, [i0, x0])
  loop = g.operations[-1]
  replicated = cm.evaluate(g, "x:8", "", "dgx-h100")
  assert replicated.peak_op in loop.body_operations
  fit = mtf.auto_layout(g, "x:8", topology="dgx-h100",
                        memory_budget=replicated.peak_memory_bytes // 2)
  assert str(fit.rules) == "z:x"
  assert fit.report.peak_memory_bytes == cm.evaluate(
      g, "x:8", "z:x", "dgx-h100").peak_memory_bytes
  assert fit.report.peak_memory_bytes <= replicated.peak_memory_bytes // 2
  # The plan keeps the body's dims: it saves and loads against the graph.
  from autolayout.plans import file as plan_file  # pylint: disable=import-outside-toplevel
  fit.save(tmp_path / "plan.json")
  assert str(plan_file.load_plan(tmp_path / "plan.json", graph=g).rules) == (
      "z:x")


def test_a_plan_tells_loops_with_other_bodies_apart():
  from autolayout.plans import identity as plan_identity  # pylint: disable=import-outside-toplevel

  def build(fn):
    g = mtf.Graph()
    mesh = mtf.Mesh(g, "m")
    x0 = mtf.zeros(mesh, "b:2;d:16")
    i0 = mtf.constant(mesh, 0, dtype="int32")
    mtf.while_loop(lambda i, x: mtf.less(i, 4),
                   lambda i, x: [i + 1, fn(x)], [i0, x0])
    return g
  fp = [plan_identity.fingerprint(build(f))
        for f in (mtf.tanh, mtf.tanh, mtf.relu)]
  assert fp[0] == fp[1] != fp[2]
