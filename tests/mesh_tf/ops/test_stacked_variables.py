"""StackedVariable and Lowering(autostack=True): like variables stored as one
stacked variable per device, with the results of the unstacked graph."""

import numpy as np
import pytest

import mesh_tf as mtf

RNG = np.random.RandomState(17)
XV = RNG.randn(4, 8).astype(np.float32)                  # b:4, d:8
WS = [RNG.randn(8, 8).astype(np.float32) for _ in range(3)]


def _build(assign=False, sgd=False):
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "mesh")
  x = mtf.import_tf_tensor(mesh, XV, "b:4;d:8")
  ws = [mtf.get_variable(mesh, f"w{i}", "d:8;e:8", initializer=w)
        for i, w in enumerate(WS)]
  # A variable of another shape, and a random-initialised one: neither
  # stacks with the others (different shape), the random one keeps its
  # own initial value.
  bias = mtf.get_variable(mesh, "bias", "e:8", initializer=0.5)
  y = x
  for w in ws:
    y = mtf.rename_dimension(mtf.tanh(mtf.einsum(
        [y, w], output_shape="b:4;e:8") + bias), "e", "d")
  updates = []
  if assign:
    updates.append(mtf.Assign([w.operation for w in ws],
                              [w * 2.0 for w in ws]))
  if sgd:
    (dw,) = mtf.gradients([mtf.reduce_sum(y)], [ws[0]])
    updates.append(mtf.apply_gradient_descent(ws[0].operation, dw, 0.1))
  return g, mesh, y, updates


def _np_forward(ws):
  y = XV
  for w in ws:
    y = np.tanh(y @ w + 0.5)
  return y


@pytest.mark.parametrize("mesh_shape,layout", [
    ("x:2", "d:x"), ("x:2", "e:x"), ("rows:2;cols:2", "b:rows;e:cols"),
    ("x:8", "d:x")])
def test_autostack_keeps_results_and_makes_one_variable(mesh_shape, layout):
  g, mesh, y, _ = _build()
  n = mtf.convert_to_shape(mesh_shape).size
  impl = mtf.PlacementMeshImpl(mesh_shape, layout, mtf.logical_cpu_devices(n))
  lowering = mtf.Lowering(g, {mesh: impl}, autostack=True)
  np.testing.assert_allclose(lowering.export_to_tf_tensor(y).numpy(),
                             _np_forward(WS), rtol=1e-5, atol=1e-5)
  assert sorted(impl.variables) == ["bias", "stacked/w0"]
  (stacked,) = [v for v in g.all_variables
                if isinstance(v, mtf.StackedVariable)]
  assert stacked.original_names == ["w0", "w1", "w2"]
  assert stacked.shape.dims[0] == mtf.Dimension("stacked", 3)
  np.testing.assert_allclose(stacked.initial_value_numpy(), np.stack(WS))
  # The same trace as a shape-only lowering of the rewritten graph.
  shape_impl = mtf.ShapeMeshImpl(mesh_shape, layout)
  mtf.Lowering(g, {mesh: shape_impl}).laid_out(y)
  lowering.laid_out(y)
  assert shape_impl.trace == impl.trace


def test_an_assign_of_all_members_becomes_one_assign_of_the_stack():
  g, mesh, _, (assign,) = _build(assign=True)
  impl = mtf.PlacementMeshImpl("x:2", "e:x", mtf.logical_cpu_devices(2))
  mtf.Lowering(g, {mesh: impl}, autostack=True)
  assert [v.name for v in assign.variables] == ["stacked/w0"]
  stacked = impl.variables["stacked/w0"]
  value = np.concatenate([s.numpy() for s in stacked.slices], axis=2)
  np.testing.assert_allclose(value, 2.0 * np.stack(WS), rtol=1e-6)


def test_variables_with_their_own_updates_and_one_device_meshes_stay_apart():
  g, mesh, y, _ = _build(sgd=True)
  impl = mtf.PlacementMeshImpl("x:2", "d:x", mtf.logical_cpu_devices(2))
  mtf.Lowering(g, {mesh: impl}, autostack=True)
  # w0 has its own SGD update; w1 and w2 stack.
  assert sorted(impl.variables) == ["bias", "stacked/w1", "w0"]
  g, mesh, y, _ = _build()
  one = mtf.PlacementMeshImpl("all:1", "", mtf.logical_cpu_devices(1))
  mtf.Lowering(g, {mesh: one}, autostack=True)
  assert sorted(one.variables) == ["bias", "w0", "w1", "w2"]
  g, mesh, y, _ = _build()
  made = mtf.rewrite_stack_variables(g, max_combined_variable_size=128)
  assert [s.original_names for s in made] == [["w0", "w1"]]
  with pytest.raises(mtf.MtfError, match="stacked already"):
    mtf.rewrite_stack_variables(g)


def test_stacked_variable_checks_its_members():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  a = mtf.get_variable(mesh, "a", "d:8").operation
  b = mtf.get_variable(mesh, "b", "d:4").operation
  with pytest.raises(mtf.ShapeError, match="only like variables stack"):
    mtf.StackedVariable([a, b])
  with pytest.raises(mtf.ShapeError, match="at least one"):
    mtf.StackedVariable([])
  s = mtf.StackedVariable([a, a.__class__(mesh, "c", a.shape, a.dtype, 1.0)])
  assert s.name == "stacked/a" and s.original_names == ["a", "c"]


def _sgd_steps(mesh_shape, layout, autostack, steps=2):
  """``steps`` SGD steps (one mtf.Lowering each, eager) of sum(y^2); the
  trained weights w0..w2, and the Lowering's TF variable names."""
  g, mesh, y, _ = _build()
  ws = [v.outputs[0] for v in g.trainable_variables]
  grads = mtf.gradients([mtf.reduce_sum(mtf.square(y))], ws)
  updates = mtf.combine_assignments(
      mtf.optimize.SgdOptimizer(0.05).apply_grads(grads, ws))
  assert len(updates) == 1  # combined: one update of all four variables
  n = mtf.convert_to_shape(mesh_shape).size
  impl = mtf.PlacementMeshImpl(mesh_shape, layout, mtf.logical_cpu_devices(n))
  for _ in range(steps):
    mtf.Lowering(g, {mesh: impl}, autostack=autostack)
  out = []
  for v in g.all_variables:
    value = impl.export_to_tf_tensor(impl.variables[v.name].value(),
                                     v.shape).numpy()
    out.extend(value if isinstance(v, mtf.StackedVariable) else
               [value] if v.name != "bias" else [])
  return out, sorted(impl.variables)


@pytest.mark.parametrize("mesh_shape,layout", [
    ("all:1", ""), ("x:2", "d:x"), ("rows:2;cols:2", "b:rows;e:cols"),
    ("x:8", "d:x")])
def test_sgd_on_a_stack_trains_as_the_unstacked_variables(mesh_shape, layout):
  stacked, names = _sgd_steps(mesh_shape, layout, autostack=True)
  plain, plain_names = _sgd_steps(mesh_shape, layout, autostack=False)
  assert plain_names == ["bias", "w0", "w1", "w2"]
  # The combined gradient-descent update writes all of w0..w2, so
  # they stack (not on one device, where stacking buys nothing).
  assert names == (plain_names if mesh_shape == "all:1"
                   else ["bias", "stacked/w0"])
  for a, b in zip(stacked, plain):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert not np.allclose(plain[0], WS[0])  # it did train


def test_combine_assignments_merges_like_updates_only():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  a, b, c = (mtf.get_variable(mesh, n, "d:4") for n in "abc")
  subs = [mtf.assign_sub(a, a * 0.5), mtf.assign_sub(b, b * 0.5)]
  other = mtf.assign(c, c + 1.0)
  twice = [mtf.assign_add(a, a), mtf.assign_add(a, b)]   # a written twice
  sgd = [mtf.apply_gradient_descent(v, v, 0.1) for v in (b, c)]
  out = mtf.combine_assignments(subs + [other] + twice + sgd)
  kinds = [(type(op).__name__, getattr(op, "mode", None),
            [v.name for v in op.variables]) for op in out]
  assert kinds == [
      ("AssignOperation", "assign_sub", ["a", "b"]),
      ("AssignOperation", "assign", ["c"]),
      ("AssignOperation", "assign_add", ["a"]),
      ("AssignOperation", "assign_add", ["a"]),
      ("ApplyGradientDescentOperation", None, ["b", "c"])]
  # The merged ops left the graph; the kept ones stayed.
  for op in subs + sgd:
    assert op not in g.operations
  assert other in g.operations and all(op in g.operations for op in twice)
  with pytest.raises(mtf.MtfError, match="one gradient per variable"):
    mtf.apply_gradient_descent([a.operation, b.operation], [a], 0.1)
