"""The two backends: ShapeMeshImpl (no TF) records exactly the trace that
PlacementMeshImpl (real devices) records; PlacementMeshImpl puts slice p on
``devices[p]``; and the collective primitives move the right data."""

import inspect

import numpy as np
import pytest
import tensorflow as tf

import mesh_tf as mtf
from tests.layout_harness import check_layouts

B, K, N = mtf.Dimension("b", 8), mtf.Dimension("k", 4), mtf.Dimension("n", 8)
_rng = np.random.RandomState(5)
XV = _rng.randn(8, 4).astype(np.float32)
WV = _rng.randn(4, 8).astype(np.float32)
YV = _rng.randn(8, 8).astype(np.float32)


def _inputs(mesh):
  return (mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]), name="x"),
          mtf.import_tf_tensor(mesh, WV, mtf.Shape([K, N]), name="w"),
          mtf.import_tf_tensor(mesh, YV, mtf.Shape([B, N]), name="y"))


def _elementwise(mesh):
  x, _, y = _inputs(mesh)
  return [mtf.where(mtf.greater(x, 0.0), mtf.tanh(x) * 2.0, -x) + y,
          mtf.to_int32(y * 4.0)]


def _einsum(mesh):
  x, w, y = _inputs(mesh)
  return [mtf.einsum([x, w], reduced_dims=[K]) + y,
          mtf.einsum([x, y], mtf.Shape([N])),  # gather-then-split case
          mtf.einsum([x, w, y], mtf.Shape([K]))]


def _reduce(mesh):
  x, _, y = _inputs(mesh)
  return [mtf.reduce_sum(x, reduced_dim=B), mtf.reduce_max(y),
          mtf.reduce_any(mtf.less(x, -1.0), reduced_dim=K),
          mtf.reduce_mean(y, output_shape=mtf.Shape([N]))]


def _softmax(mesh):
  _, _, y = _inputs(mesh)
  return [mtf.softmax(y, N), mtf.log_softmax(y, B),
          mtf.reduce_logsumexp(y, N)]


def _variables(mesh):
  x, w, _ = _inputs(mesh)
  v = mtf.get_variable(mesh, "v", mtf.Shape([K, N]),
                       initializer=mtf.random_uniform_initializer(seed=1))
  mtf.assign_add(v, w)
  return [mtf.einsum([x, mtf.read(v)], reduced_dims=[K])]


def _creation_and_control(mesh):
  x, _, _ = _inputs(mesh)
  r = mtf.range(mesh, N, dtype="float32", start=3, step=2)
  c = mtf.constant(mesh, 1.5, mtf.Shape([B, N]))
  z = mtf.zeros_like(x) + mtf.ones(mesh, mtf.Shape([K])) * 2.0
  full = mtf.constant(mesh, YV, mtf.Shape([B, N]))
  dep = mtf.depend(mtf.stop_gradient(c * r), [z, full])
  return [dep, z, full - mtf.ones_like(full), mtf.range(mesh, B, "int32")]


FAMILIES = {
    "elementwise": (_elementwise, lambda: [
        np.where(XV > 0, np.tanh(XV) * 2, -XV)[:, :, None] + YV[:, None, :],
        (YV * 4).astype(np.int32)]),
    "einsum": (_einsum, lambda: [
        XV @ WV + YV, np.einsum("bk,bn->n", XV, YV),
        np.einsum("bk,kn,bn->k", XV, WV, YV)]),
    "reduce": (_reduce, lambda: [XV.sum(0), YV.max(), (XV < -1).any(1),
                                 YV.mean(0)]),
    "softmax": (_softmax, None),
    "variables": (_variables, None),
    "creation_and_control": (_creation_and_control, lambda: [
        1.5 * np.broadcast_to(3 + 2 * np.arange(8.0), (8, 8)),
        np.full((8, 4), 2.0), YV - 1, np.arange(8)]),
}
LAYOUTS = [("all:1", ""), ("x:2", "b:x"), ("x:2", "k:x"),
           ("rows:2;cols:2", "b:rows;k:cols"),
           ("rows:2;cols:4", "b:rows;n:cols"),
           ("rows:2;cols:4", "k:cols;n:rows"),
           ("x:8", "b:x"), ("x:8", "n:x")]


def _lower_both(build, mesh_shape, layout):
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  outs = build(mesh)
  n = mtf.convert_to_shape(mesh_shape).size
  placed = mtf.PlacementMeshImpl(mesh_shape, layout,
                                 mtf.logical_cpu_devices(n))
  shaped = mtf.ShapeMeshImpl(mesh_shape, layout)
  results = []
  for impl in (shaped, placed):
    lowering = mtf.Lowering(graph, {mesh: impl})
    for t in outs:
      lowering.laid_out(t)
    results.append(lowering)
  return outs, results[0], results[1]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_shape_trace_equals_placement_trace(family):
  build, _ = FAMILIES[family]
  checked = collectives = 0
  for mesh_shape, layout in LAYOUTS:
    _, shaped, placed = _lower_both(build, mesh_shape, layout)
    s, p = shaped.mesh_to_impl, placed.mesh_to_impl
    (st,), (pt,) = [i.trace for i in s.values()], [i.trace for i in
                                                    p.values()]
    assert st.collectives == pt.collectives, (mesh_shape, layout)
    assert st.compute == pt.compute, (mesh_shape, layout)
    assert st.variables == pt.variables, (mesh_shape, layout)
    assert st == pt
    # The slice shapes agree too, tensor by tensor.
    for t, laid in placed.tensors.items():
      lt = laid.to_laid_out_tensor()
      assert shaped.tensors[t].slice_shape == lt.slice_shape
      assert all(tuple(x.shape) == lt.slice_shape for x in lt.tensor_list)
    checked += 1
    collectives += len(pt.collectives)
  assert checked == len(LAYOUTS)
  if family != "elementwise" and family != "creation_and_control":
    assert collectives > 0


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_op_families_under_every_layout(family):
  build, reference = FAMILIES[family]
  check_layouts(build, [B, K, N], reference, limit=6)


def _device_index(name):
  spec = tf.DeviceSpec.from_string(name)
  assert spec.device_type == "CPU"
  return spec.device_index


@pytest.mark.parametrize("order", ["natural", "reversed"])
def test_placement_puts_slice_p_on_devices_p(order):
  devices = mtf.logical_cpu_devices(8)
  if order == "reversed":
    devices = devices[::-1]
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  x, w, y = _inputs(mesh)
  v = mtf.get_variable(mesh, "v", mtf.Shape([B, N]), initializer=1.0)
  mm = mtf.einsum([x, w], reduced_dims=[K])  # all-reduce over cols
  g = mtf.einsum([x, y], mtf.Shape([N]))  # all-concat over cols
  out = mtf.relu(mm) + v
  impl = mtf.PlacementMeshImpl("rows:2;cols:4", "b:rows;k:cols", devices)
  lowering = mtf.Lowering(graph, {mesh: impl})
  for t in (x, w, y, v, mm, g, out):
    slices = lowering.laid_out(t).tensor_list
    assert len(slices) == 8
    for p, s in enumerate(slices):
      assert _device_index(s.device) == _device_index(devices[p]), (t, p)
  for p, s in enumerate(impl.variables["v"].slices):
    assert _device_index(s.device) == _device_index(devices[p])
  # The device order changes nothing in the values.
  np.testing.assert_allclose(lowering.export_to_tf_tensor(out).numpy(),
                             np.maximum(XV @ WV, 0) + 1, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(lowering.export_to_tf_tensor(g).numpy(),
                             np.einsum("bk,bn->n", XV, YV), rtol=1e-5,
                             atol=1e-5)


# --- the primitives, on known data -------------------------------------------
def _pnum_tensor(impl, shape=(2, 3)):
  """A LaidOutTensor whose slice on processor p is filled with p."""
  return impl.slicewise_pnum(lambda p: tf.fill(shape, float(p)),
                             slice_shape=shape, dtype="float32")


def _values(laid):
  return [t.numpy() for t in laid.tensor_list]


def _both(mesh_shape="rows:2;cols:4"):
  n = mtf.convert_to_shape(mesh_shape).size
  return (mtf.PlacementMeshImpl(mesh_shape, "", mtf.logical_cpu_devices(n)),
          mtf.ShapeMeshImpl(mesh_shape, ""))


def test_allreduce_kinds_and_groups():
  placed, shaped = _both()
  for impl in (shaped, placed):
    x = _pnum_tensor(impl)
    outs = [impl.allreduce(x, "cols", "SUM"),
            impl.allreduce(x, "rows", "MAX"),
            impl.allreduce(x, ("rows", "cols"), "MIN")]
    assert all(o.slice_shape == (2, 3) for o in outs)
  s, m, mn = [_values(o) for o in outs]  # the placement backend's
  for p in range(8):
    r, c = divmod(p, 4)
    np.testing.assert_array_equal(s[p], np.full((2, 3), 16 * r + 6))
    np.testing.assert_array_equal(m[p], np.full((2, 3), 4 + c))
    np.testing.assert_array_equal(mn[p], np.zeros((2, 3)))
  assert placed.trace == shaped.trace
  assert [c.key() for c in placed.trace.collectives] == [
      ("allreduce", ("cols",), 4, 24, "SUM"),
      ("allreduce", ("rows",), 2, 24, "MAX"),
      ("allreduce", ("rows", "cols"), 8, 24, "MIN")]
  with pytest.raises(mtf.MtfError, match="unknown all-reduce reduction"):
    placed.allreduce(x, "cols", "PROD")


def test_allreduce_sums_once_per_group_and_copies_out():
  # Summing on every device would do each group's sum p times over; the
  # backend sums on the group's first device and copies the sum out.
  placed = mtf.PlacementMeshImpl("rows:2;cols:4", "",
                                 mtf.logical_cpu_devices(8))
  graph = tf.Graph()
  with graph.as_default():
    x = placed.slicewise_pnum(lambda p: tf.fill((2, 3), float(p)),
                              slice_shape=(2, 3), dtype="float32")
    before = {op.name for op in graph.get_operations()}
    out = placed.allreduce(x, "cols", "SUM")
    new = [op for op in graph.get_operations() if op.name not in before]
  sums = [op for op in new if op.type == "AddN"]
  assert sorted(op.device[-1] for op in sums) == ["0", "4"]  # group heads
  assert sorted(int(t.device[-1]) for t in out.tensor_list) == list(range(8))
  copies = [op for op in new if op.type == "Identity"]
  assert len(copies) == 6 and all(len(op.inputs) == 1 for op in copies)


def test_allconcat_alltoall_allsplit():
  placed, shaped = _both()
  x = _pnum_tensor(placed, (4, 4))
  cat = placed.allconcat(x, "cols", 1)
  assert cat.slice_shape == (4, 16)
  for p, v in enumerate(_values(cat)):
    r = p // 4
    np.testing.assert_array_equal(
        v, np.concatenate([np.full((4, 4), 4 * r + c) for c in range(4)], 1))
  # alltoall: split axis 0 in 4 parts, part j to coordinate j, concat on 1.
  pos = placed.slicewise_pnum(
      lambda p: tf.reshape(tf.range(16, dtype=tf.float32) + 100 * p, (4, 4)),
      slice_shape=(4, 4), dtype="float32")
  a2a = placed.alltoall(pos, "cols", 0, 1)
  assert a2a.slice_shape == (1, 16)
  src = _values(pos)
  for p, v in enumerate(_values(a2a)):
    r, c = divmod(p, 4)
    expected = np.concatenate([src[4 * r + i][c:c + 1] for i in range(4)], 1)
    np.testing.assert_array_equal(v, expected)
  split = placed.allsplit(pos, "rows", 0)
  for p, v in enumerate(_values(split)):
    r = p // 4
    np.testing.assert_array_equal(v, src[p][2 * r:2 * r + 2])
  # The shape backend agrees on shapes and on the trace.
  xs = _pnum_tensor(shaped, (4, 4))
  assert shaped.allconcat(xs, "cols", 1).slice_shape == (4, 16)
  assert shaped.alltoall(xs, "cols", 0, 1).slice_shape == (1, 16)
  assert shaped.allsplit(xs, "rows", 0).slice_shape == (2, 4)
  assert [c.key() for c in placed.trace.collectives] == [
      c.key() for c in shaped.trace.collectives] == [
          ("allconcat", ("cols",), 4, 64, None),
          ("alltoall", ("cols",), 4, 64, None)]  # allsplit is free


def test_receive_and_shift():
  placed, shaped = _both("x:4")
  x = _pnum_tensor(placed, (2,))
  got = _values(placed.receive(x, "x", [3, 0, None, 2]))
  assert [v[0] for v in got] == [3, 0, 0, 2]
  wrap = _values(placed.shift_by_n_processors(x, "x", 1, wrap=True))
  assert [v[0] for v in wrap] == [3, 0, 1, 2]
  nowrap = _values(placed.shift_by_n_processors(x, "x", -2, wrap=False))
  assert [v[0] for v in nowrap] == [2, 3, 0, 0]
  # The identity permutation is no communication at all.
  assert placed.receive(x, "x", [0, 1, 2, 3]) is x
  xs = _pnum_tensor(shaped, (2,))
  shaped.receive(xs, "x", [3, 0, None, 2])
  shaped.shift_by_n_processors(xs, "x", 1, wrap=True)
  shaped.shift_by_n_processors(xs, "x", -2, wrap=False)
  assert placed.trace == shaped.trace
  assert [c.key() for c in placed.trace.collectives] == [
      ("receive", ("x",), 4, 8, None)] * 3


def test_pnum_and_pcoord_slices():
  placed, _ = _both()
  assert [int(v) for v in _values(placed.laid_out_pnum())] == list(range(8))
  assert [int(v) for v in _values(placed.laid_out_pcoord("cols"))] == [
      0, 1, 2, 3] * 2
  assert [int(v) for v in _values(placed.laid_out_pcoord(0))] == [0] * 4 + [
      1] * 4


def test_collectives_over_size_one_axes_are_free():
  placed = mtf.PlacementMeshImpl("a:1;b:2", "", mtf.logical_cpu_devices(2))
  x = _pnum_tensor(placed)
  assert placed.allreduce(x, "a") is x
  assert placed.allconcat(x, "a", 0) is x
  assert placed.alltoall(x, "a", 0, 1) is x
  assert placed.trace.collectives == []


# --- the backend contract ----------------------------------------------------------
def test_mesh_impl_is_an_abstract_contract():
  # Issue 16 changed this one assertion: MeshImpl(shape, layout) now
  # constructs, for geometry only (its primitives raise
  # BackendRequiredError, see test_bare_mesh_impl_*); the abstract contract
  # every backend implements is MeshBackend.
  assert not inspect.isabstract(mtf.MeshImpl)
  with pytest.raises(TypeError):
    mtf.MeshBackend("x:2", "")  # pylint: disable=abstract-class-instantiated
  abstract = set(mtf.MeshBackend.__abstractmethods__)
  # _reduce_scatter joined the contract with sharded storage (issue 13):
  # ZeRO gradients reduce-scatter onto their shard on every backend.
  assert abstract == {"_allreduce", "_allconcat", "_alltoall", "_receive",
                      "_reduce_scatter", "_slicewise", "_import",
                      "export_to_tf_tensor", "_make_variable"}
  for impl_cls in (mtf.ShapeMeshImpl, mtf.PlacementMeshImpl):
    assert not inspect.isabstract(impl_cls)

  class Partial(mtf.ShapeMeshImpl.__bases__[0]):
    def _allreduce(self, x, mesh_axes, reduction):
      return x
  with pytest.raises(TypeError):
    Partial("x:2", "")  # pylint: disable=abstract-class-instantiated


def test_shape_backend_holds_no_values():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  x, _, _ = _inputs(mesh)
  impl = mtf.ShapeMeshImpl("x:2", "b:x")
  lowering = mtf.Lowering(graph, {mesh: impl})
  assert lowering.laid_out(x).tensor_list is None
  with pytest.raises(NotImplementedError, match="no values"):
    lowering.export_to_tf_tensor(x)


def test_a_variables_initializer_runs_once_per_distinct_slice():
  """Processors that hold the same slice share one initial value: on
  ``a:2;b:4`` with ``r`` split over ``a`` there are 2 slices for 8
  processors, and each processor's slice is the right block."""
  impl = mtf.PlacementMeshImpl("a:2;b:4", "r:a", mtf.logical_cpu_devices(8))
  full = np.arange(32, dtype=np.float32).reshape(8, 4)
  calls = []

  def init(full_shape, begin, slice_shape, dtype):
    calls.append(tuple(begin))
    return full[begin[0]:begin[0] + slice_shape[0]]
  v = impl.make_variable("v", mtf.Shape([mtf.Dimension("r", 8), K]),
                         "float32", init)
  assert sorted(calls) == [(0, 0), (4, 0)]
  for p, s in enumerate(v.slices):
    a = p // 4
    np.testing.assert_array_equal(s.numpy(), full[4 * a:4 * a + 4])
    assert s.device.endswith(f"CPU:{p}")
