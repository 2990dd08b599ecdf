"""Lowering as an explicit call: ``mtf.lower`` for a graph,
``mtf.lower_operation`` for one op, and Mesh TF's ``Lowering(graph, impls)``
spelling of ``lower``."""

import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf.lowering.geometry import ProcessorGroups, processor_groups

B, K, N = mtf.Dimension("b", 8), mtf.Dimension("k", 4), mtf.Dimension("n", 8)
_rng = np.random.RandomState(5)
XV = _rng.randn(8, 4).astype(np.float32)
WV = _rng.randn(4, 8).astype(np.float32)


def _mlp():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]), name="x")
  w = mtf.get_variable(mesh, "w", mtf.Shape([K, N]),
                       initializer=mtf.constant_initializer(0.5))
  h = mtf.einsum([x, w], reduced_dims=[K], name="mm")
  y = mtf.reduce_sum(mtf.relu(h) + h, name="total")  # lazy sums meet in add
  upd = mtf.assign(w, w * 0.5)
  return graph, mesh, (x, w, h, y, upd)


LAYOUTS = ["", "k:cols", "k:cols;b:rows", "n:cols;b:rows"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_lower_is_the_compat_constructor(layout):
  graph, mesh, (_, _, _, y, _) = _mlp()
  a = mtf.PlacementMeshImpl("rows:2;cols:4", layout,
                            mtf.logical_cpu_devices(8))
  b = mtf.PlacementMeshImpl("rows:2;cols:4", layout,
                            mtf.logical_cpu_devices(8))
  explicit = mtf.lower(graph, {mesh: a})
  compat = mtf.Lowering(graph, {mesh: b})
  # mtf.Lowering is Mesh TF's spelling (mesh_tf.compat.lowering, with its
  # autostack option) of the one Lowering class that lower returns.
  assert isinstance(explicit, mtf.lowering.Lowering)
  assert isinstance(compat, mtf.lowering.Lowering)
  np.testing.assert_allclose(explicit.export_to_tf_tensor(y).numpy(),
                             compat.export_to_tf_tensor(y).numpy())
  assert a.trace == b.trace


def test_empty_lowering_lowers_nothing_until_asked():
  graph, mesh, (x, _, h, _, _) = _mlp()
  impl = mtf.ShapeMeshImpl("rows:2;cols:4", "k:cols")
  lowering = mtf.Lowering.empty(graph, {mesh: impl})
  assert lowering.tensors == {} and impl.trace.compute == []
  lowering.lower_operations(graph.operations[:2])
  assert x in lowering.tensors and h not in lowering.tensors


@pytest.mark.parametrize("layout", LAYOUTS)
def test_ops_lowered_one_by_one_give_the_whole_graph_trace(layout):
  graph, mesh, _ = _mlp()
  whole = mtf.ShapeMeshImpl("rows:2;cols:4", layout)
  mtf.lower(graph, {mesh: whole})
  alone = mtf.ShapeMeshImpl("rows:2;cols:4", layout)
  values, variables, traces = {}, {}, []
  for op in graph.operations:
    r = mtf.lower_operation(op, alone, [values[t] for t in op.inputs],
                            variables=variables)
    values.update(zip(op.outputs, r.outputs))
    if isinstance(op, mtf.Variable):
      variables[op] = alone.laid_out_variable(op.name, op.shape, op.dtype)
    traces.append(r.trace)
  assert alone.trace == whole.trace
  assert [c for t in traces for c in t.collectives] == whole.trace.collectives
  assert [c for t in traces for c in t.compute] == whole.trace.compute


def test_one_op_gives_its_outputs_and_its_own_trace():
  graph, _, (_, _, h, _, _) = _mlp()
  impl = mtf.ShapeMeshImpl("rows:2;cols:4", "k:cols;b:rows")
  r = mtf.lower_operation(h.operation, impl)  # stand-in inputs
  (out,) = r.outputs
  assert isinstance(out, mtf.LazyAllreduceSum) and out.pending
  assert out.slice_shape == (4, 8) and r.trace.collectives == []
  (rec,) = r.trace.compute
  assert rec.op_name == "mm" and rec.flops_per_device == 2 * 4 * 1 * 8
  out.to_laid_out_tensor()  # forcing it is recorded on the backend
  assert not out.pending and len(impl.trace.collectives) == 1
  assert r.trace.collectives == []  # the op's own trace does not change


def test_one_op_forcing_a_pending_input_records_it():
  graph, _, (_, _, h, _, _) = _mlp()
  relu = next(op for op in graph.operations if h in op.inputs)
  impl = mtf.ShapeMeshImpl("rows:2;cols:4", "k:cols")
  pending = mtf.LazyAllreduceSum(
      impl, mtf.LaidOutTensor(impl.slice_shape(h), h.dtype), (1,),
      source_op="earlier")
  r = mtf.lower_operation(relu, impl, [pending])
  (rec,) = r.trace.collectives
  assert rec.kind == "allreduce" and rec.source_op == "earlier"
  assert rec.op_name == relu.name and not pending.pending


def test_a_pending_input_stand_in_says_whether_the_op_forced_it():
  """The cost tables' typed pending input (issue 38): forcing it records no
  all-reduce (the op that left the sum prices it), and ``forced`` says
  whether the op needed the reduced value."""
  from mesh_tf.lowering.laid_out import PendingInput
  graph, _, (_, _, h, _, _) = _mlp()
  relu = next(op for op in graph.operations if h in op.inputs)
  impl = mtf.ShapeMeshImpl("rows:2;cols:4", "k:cols")
  stand_in = PendingInput(
      impl, mtf.LaidOutTensor(impl.slice_shape(h), h.dtype), (1,))
  assert not stand_in.forced and stand_in.pending
  r = mtf.lower_operation(relu, impl, [stand_in])
  assert stand_in.forced and r.trace.collectives == []
  assert r.outputs[0].slice_shape == stand_in.slice_shape


def test_one_op_errors_name_what_to_change():
  graph, _, (x, w, h, _, upd) = _mlp()
  impl = mtf.ShapeMeshImpl("rows:2;cols:4", "")
  with pytest.raises(mtf.MtfError, match="has 2 inputs, but 1 laid-out"):
    mtf.lower_operation(h.operation, impl, [None])
  with pytest.raises(mtf.MeshAxisReuseError):
    mtf.lower_operation(h.operation,
                        mtf.ShapeMeshImpl("rows:2;cols:4", "b:cols;k:cols"))
  placed = mtf.PlacementMeshImpl("rows:2;cols:4", "",
                                 mtf.logical_cpu_devices(8))
  with pytest.raises(mtf.MtfError, match="variable w .* has not been created"):
    mtf.lower_operation(upd, placed)
  # A shape-only backend stands the variable in.
  r = mtf.lower_operation(upd, impl)
  assert r.lowered == [] and r.outputs == ()


def test_processor_groups_table_equals_the_computed_groups():
  for sizes in [(8,), (2, 4), (4, 2, 4), (1, 3, 2)]:
    table = ProcessorGroups(sizes)
    impl = mtf.ShapeMeshImpl(
        ";".join(f"a{i}:{s}" for i, s in enumerate(sizes)), "")
    n = len(sizes)
    for mask in range(2 ** n):
      axes = tuple(i for i in range(n) if mask >> i & 1)
      expected = {}
      for p in range(impl.size):  # by definition: same coords off ``axes``
        c = impl.pnum_to_processor_coordinates(p)
        expected.setdefault(tuple(x for i, x in enumerate(c)
                                  if i not in axes), []).append(p)
      expected = [tuple(g) for g in expected.values()]
      assert processor_groups(sizes, axes) == expected
      assert table[axes] == expected == impl.processor_groups(axes)
      assert table[tuple(reversed(axes))] == expected
