"""One tensor dim over several mesh axes (``batch:rows+cols``, JAX's
``P(('rows', 'cols'))``): the rules, the layout, and a lowering whose
results equal one device and whose shape-only trace equals the real one."""

import itertools
import pickle

import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf import models, training
from mesh_tf.training import optimize
from tests.layout_harness import _assert_close, run

# --- the language -------------------------------------------------------------


def test_rule_forms_agree_and_round_trip():
  r = mtf.convert_to_layout_rules("batch:rows+cols;d_ff:z")
  assert r.axes_dict() == {"batch": ("rows", "cols"), "d_ff": ("z",)}
  assert r.as_dict() == {"batch": ("rows", "cols"), "d_ff": "z"}
  assert r.mesh_axes_of("batch") == ("rows", "cols")
  assert r.mesh_axes_of("heads") == ()
  assert r.is_multi_axis and not mtf.convert_to_layout_rules("b:x").is_multi_axis
  assert str(r) == "batch:rows+cols;d_ff:z"
  assert repr(r) == "LayoutRules[batch:rows+cols, d_ff:z]"
  assert mtf.convert_to_layout_rules(str(r)) == r
  assert mtf.convert_to_layout_rules(
      {"batch": ("rows", "cols"), "d_ff": "z"}) == r
  assert mtf.convert_to_layout_rules(
      [("d_ff", "z"), ("batch", ["rows", "cols"])]) == r
  assert pickle.loads(pickle.dumps(r)) == r
  # Pairs: one per dim; a multi-axis dim's value is its tuple.
  assert list(r) == [("batch", ("rows", "cols")), ("d_ff", "z")]
  assert mtf.LayoutRules(r.pairs) == r and len(r) == 2
  # The order is the meaning: rows+cols is not cols+rows.
  assert r != mtf.convert_to_layout_rules("batch:cols+rows;d_ff:z")


def test_tensor_layout_holds_a_tuple_per_dim():
  r = mtf.convert_to_layout_rules("batch:rows+cols;d_ff:z")
  layout = r.tensor_layout("batch:16,d_model:4,d_ff:6", "rows:2;cols:4;z:3")
  assert layout.tensor_axis_to_mesh_axes == ((0, 1), (), (2,))
  assert layout == mtf.TensorLayout(((0, 1), None, 2))
  assert layout.is_multi_axis and not layout.is_fully_replicated
  assert layout.mesh_axis_to_tensor_axis(3) == (0, 0, 2)
  assert layout.mesh_axes() == (0, 1, 2)
  assert layout.slice_sizes(mtf.convert_to_shape("batch:16,d_model:4,d_ff:6"),
                            mtf.convert_to_shape("rows:2;cols:4;z:3")) == (
                                2, 4, 2)
  assert pickle.loads(pickle.dumps(layout)) == layout
  assert "tensor_axis_to_mesh_axes=((0, 1), (), (2,))" in repr(layout)
  # Single-axis accessors of the original API refuse, with a typed error.
  with pytest.raises(mtf.MultiAxisDimError, match="tensor_axis_to_mesh_axes"):
    layout.tensor_axis_to_mesh_axis  # pylint: disable=pointless-statement
  with pytest.raises(mtf.MultiAxisDimError):
    tuple(layout)
  assert layout[2] == 2 and layout[1] is None
  with pytest.raises(mtf.MultiAxisDimError, match=r"batch=16.*rows\+cols"):
    r.tensor_dimension_to_mesh_axis(mtf.Dimension("batch", 16),
                                    "rows:2;cols:4;z:3")
  assert issubclass(mtf.MultiAxisDimError, mtf.LayoutError)


def test_multi_axis_errors_name_dim_axes_and_fix():
  with pytest.raises(mtf.MeshAxisReuseError, match="rows.*twice"):
    mtf.convert_to_layout_rules("batch:rows+rows")
  with pytest.raises(mtf.ParseError, match="batch"):
    mtf.convert_to_layout_rules("batch:rows+")
  r = mtf.convert_to_layout_rules("batch:rows+cols;d_ff:cols")
  with pytest.raises(mtf.MeshAxisReuseError) as e:
    r.tensor_layout("batch:16,d_ff:8", "rows:2;cols:4", "h:0")
  assert "batch=16" in str(e.value) and "d_ff=8" in str(e.value)
  assert "cols=4" in str(e.value)
  with pytest.raises(mtf.IndivisibleDimError) as e:
    mtf.convert_to_layout_rules("batch:rows+cols").tensor_layout(
        "batch:12", "rows:2;cols:4", "x:0")
  msg = str(e.value)
  assert "batch=12" in msg and "rows=2 * cols=4 = 8" in msg
  assert "multiple of 8" in msg and "batch:rows+cols" in msg
  with pytest.raises(mtf.UnknownNameError, match="'z'.*rows"):
    mtf.ShapeMeshImpl("rows:2;cols:4", "batch:rows+z")
  # Two different rules for one dim stay an error (and say how to combine).
  with pytest.raises(mtf.DimMappedTwiceError, match=r"b:rows\+cols"):
    mtf.convert_to_layout_rules("b:rows;b:cols")


def test_slice_begin_puts_the_first_axis_major():
  shape = mtf.convert_to_shape("batch:16")
  for rules, block in [("batch:rows+cols", lambda r, c: 4 * r + c),
                       ("batch:cols+rows", lambda r, c: 2 * c + r)]:
    impl = mtf.ShapeMeshImpl("rows:2;cols:4", rules)
    assert impl.slice_shape(shape) == (2,)
    got = [impl.slice_begin(shape, p)[0] for p in range(8)]
    assert got == [2 * block(p // 4, p % 4) for p in range(8)]


# --- lowering -----------------------------------------------------------------
MESHES = ["rows:2;cols:2", "rows:2;cols:4", "a:2;b:2;c:2"]


def multi_axis_layouts(dims, mesh_shape, limit=12):
  """Layouts of ``dims`` on ``mesh_shape`` with at least one dim over an
  ordered pair of axes (divisible, no axis twice), a stable sample."""
  mesh_shape = mtf.convert_to_shape(mesh_shape)
  axes = [a for a in mesh_shape if a.size > 1]
  options = [()] + [(a,) for a in axes] + list(itertools.permutations(axes, 2))
  out = []
  for choice in itertools.product(options, repeat=len(dims)):
    used = [a.name for c in choice for a in c]
    if len(used) != len(set(used)) or all(len(c) < 2 for c in choice):
      continue
    if any(d.size % int(np.prod([a.size for a in c])) for d, c in
           zip(dims, choice)):
      continue
    out.append(";".join(f"{d.name}:{'+'.join(a.name for a in c)}"
                        for d, c in zip(dims, choice) if c))
  if len(out) > limit:
    rng = np.random.RandomState(len(out))
    out = [out[i] for i in sorted(rng.choice(len(out), limit, replace=False))]
  return out


def check_multi_axis(build, dims, meshes=MESHES, limit=12, rtol=1e-5,
                     atol=1e-5):
  base, _ = run(build, "all:1", "")
  count = 0
  for mesh_shape in meshes:
    for layout in multi_axis_layouts(dims, mesh_shape, limit):
      vals, _ = run(build, mesh_shape, layout)  # also: shape trace == real
      for v, b in zip(vals, base):
        _assert_close(v, b, rtol, atol, False,
                      f"mesh {mesh_shape!r} layout {layout!r}")
      count += 1
  assert count > 0
  return count


RNG = np.random.RandomState(0)
B, K, N = mtf.Dimension("b", 8), mtf.Dimension("k", 8), mtf.Dimension("n", 4)
XV = RNG.randn(8, 8).astype(np.float32)
WV = RNG.randn(8, 4).astype(np.float32)


def test_einsum_matmul_under_multi_axis_layouts():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]))
    w = mtf.import_tf_tensor(mesh, WV, mtf.Shape([K, N]))
    return mtf.einsum([x, w], output_shape=mtf.Shape([B, N]))
  base, _ = run(build, "all:1", "")
  np.testing.assert_allclose(base[0], XV @ WV, rtol=1e-5)
  check_multi_axis(build, [B, K, N], limit=16)


def test_reductions_over_a_multi_axis_dim():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]))
    return [mtf.reduce_sum(x, reduced_dim=B), mtf.reduce_max(x, reduced_dim=B),
            mtf.reduce_sum(x), mtf.softmax(x, B),
            mtf.layers.layer_norm(x, K, name="ln")]
  check_multi_axis(build, [B, K])


def test_reshape_keeps_or_moves_a_multi_axis_split():
  xv = RNG.randn(8, 4, 2).astype(np.float32)
  C = mtf.Dimension("c", 2)
  M = mtf.Dimension("m", 8)
  B2, KK = mtf.Dimension("b2", 8), mtf.Dimension("kk", 8)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, mtf.Shape([B, N, C]))
    same_b = mtf.reshape(x, mtf.Shape([B, M]))   # b stays leading: kept
    renamed = mtf.reshape(x, mtf.Shape([B2, M]))  # b's split moves to b2
    flat = mtf.reshape(x, mtf.Shape([mtf.Dimension("f", 64)]))
    back = mtf.reshape(same_b, mtf.Shape([KK, N, C]))
    return [same_b, renamed, flat, back]
  check_multi_axis(build, [B, M, B2, KK], limit=10)


def test_kept_multi_axis_split_costs_no_collective():
  C, M = mtf.Dimension("c", 2), mtf.Dimension("m", 8)
  xv = RNG.randn(8, 4, 2).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, mtf.Shape([B, N, C]))
    return mtf.reshape(x, mtf.Shape([B, M]))
  _, trace = run(build, "rows:2;cols:4", "b:rows+cols")
  assert trace.collectives == []


def test_one_collective_record_spans_the_axes():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]))
    w = mtf.import_tf_tensor(mesh, WV, mtf.Shape([K, N]))
    return mtf.einsum([x, w], output_shape=mtf.Shape([B, N]))
  _, trace = run(build, "rows:2;cols:4", "k:cols+rows")
  [rec] = trace.collectives
  assert rec.kind == "allreduce" and rec.group_size == 8
  assert set(rec.mesh_axes) == {"rows", "cols"}

  def gather(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]))
    return mtf.reshape(x, mtf.Shape([mtf.Dimension("b2", 8), K]))
  # b's split is not carried by b2: one all-concat over both axes.
  _, trace = run(gather, "rows:2;cols:4", "b:cols+rows")
  assert [(c.kind, c.mesh_axes, c.group_size) for c in trace.collectives] == [
      ("allconcat", ("cols", "rows"), 8)]


def test_collectives_over_an_ordered_axis_pair_match_numpy():
  impl = mtf.PlacementMeshImpl("rows:2;cols:4", "b:cols+rows",
                               mtf.logical_cpu_devices(8))
  shape = mtf.convert_to_shape("b:8,k:8")
  full = RNG.randn(8, 8).astype(np.float32)
  laid = impl.import_laid_out(full, shape, "float32")
  axes = impl.tensor_dimension_to_mesh_axes(shape[0])
  assert axes == (1, 0)
  whole = impl.allconcat(laid, axes, 0)
  for p in range(8):
    np.testing.assert_array_equal(whole.tensor_list[p].numpy(), full)
  again = impl.allsplit(whole, axes, 0)
  for p in range(8):
    np.testing.assert_array_equal(again.tensor_list[p].numpy(),
                                  laid.tensor_list[p].numpy())
  # alltoall b -> k: afterwards k is split over (cols, rows), b whole.
  moved = impl.alltoall(laid, axes, 1, 0)
  k_impl = mtf.ShapeMeshImpl("rows:2;cols:4", "k:cols+rows")
  for p in range(8):
    begin = k_impl.slice_begin(shape, p)[1]
    np.testing.assert_array_equal(moved.tensor_list[p].numpy(),
                                  full[:, begin:begin + 1])
  # reduce_scatter of a replicated value: block c of the sum on block c.
  rep = mtf.PlacementMeshImpl("rows:2;cols:4", "", mtf.logical_cpu_devices(8))
  x = rep.import_laid_out(full, shape, "float32")
  rs = impl.reduce_scatter(x.__class__(x.slice_shape, x.dtype, x.tensor_list),
                           axes, 0)
  for p in range(8):
    b = impl.slice_begin(shape, p)[0]
    np.testing.assert_allclose(rs.tensor_list[p].numpy(),
                               8 * full[b:b + 1], rtol=1e-6)
  np.testing.assert_array_equal(impl.export_to_tf_tensor(laid, shape).numpy(),
                                full)


def _tiny_lm():
  return models.transformer_lm(layers=1, d_model=16, heads=4, d_kv=4,
                               d_ff=32, vocab=32, length=8, batch=8)


@pytest.mark.parametrize("layout", ["batch:x+y", "batch:y+x;heads:z",
                                    "batch:x;d_ff:y+z;vocab:z+y"])
def test_transformer_train_step_with_multi_axis_batch_matches_one_device(
    layout):
  values = _tiny_lm().random_values(seed=3)
  values["targets"] = values["inputs"]
  mesh = "x:2;y:4" if "z" not in layout else "x:2;y:2;z:2"
  losses = {}
  for mesh_shape, rules, n in [("x:1", "", 1), (mesh, layout, 8)]:
    step = training.train_step_for_model(
        _tiny_lm(), mesh_shape, rules, mtf.logical_cpu_devices(n),
        optimize.SgdOptimizer(1.0))
    losses[n] = [float(step(**values)) for _ in range(3)]
  np.testing.assert_allclose(losses[8], losses[1], rtol=2e-5, atol=2e-5)
  assert losses[8][-1] < losses[8][0]


def test_topk_cumsum_slicing_and_gather_over_a_multi_axis_dim():
  V = mtf.Dimension("v", 16)
  kd = mtf.Dimension("kd", 8)
  emb = RNG.randn(16, 4).astype(np.float32)
  ids = RNG.randint(0, 16, size=(8,)).astype(np.int32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]))
    vals, idx = mtf.top_k(x, K, kd)
    w = mtf.import_tf_tensor(mesh, emb, mtf.Shape([V, N]))
    i = mtf.import_tf_tensor(mesh, ids, mtf.Shape([B]), dtype="int32")
    return [vals, idx, mtf.cumsum(x, K), mtf.argmax(x, B),
            mtf.gather(w, i, V), mtf.concat([x, x], K.name),
            mtf.unstack(mtf.reshape(x, mtf.Shape([B, N, mtf.Dimension(
                "two", 2)])), N)[1]]
  check_multi_axis(build, [B, K, V, kd], limit=8)


def test_shift_over_a_multi_axis_dim_equals_one_device():
  # The dim's blocks are in the axes' order (major first) across the whole
  # spanning group: a shift moves block edges along that order, wrapping
  # or not, by less or more than a block (two receives), both ways.
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, K]))
    return [mtf.shift(x, 1, B, wrap=True), mtf.shift(x, -3, B, wrap=False),
            mtf.shift(x, 5, B, wrap=True), mtf.shift(x, 2, K, wrap=False),
            mtf.shift(x, -1, K, wrap=True)]
  check_multi_axis(build, [B, K], limit=8)


def test_conv_halo_over_a_multi_axis_dim_equals_one_device():
  # A split spatial dim exchanges halos with the neighbouring blocks of
  # the spanning group; the gradients (input and filter) do the same.
  from mesh_tf.gradients import gradients
  from mesh_tf.ops import conv as conv_ops
  h, ci, co = (mtf.Dimension("h", 8), mtf.Dimension("ci", 2),
               mtf.Dimension("co", 3))
  xv = RNG.randn(2, 8, 2).astype(np.float32)
  wv = RNG.randn(3, 2, 3).astype(np.float32)
  rv = RNG.randn(2, 8, 3).astype(np.float32)
  bb = mtf.Dimension("bb", 2)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, mtf.Shape([bb, h, ci]))
    w = mtf.import_tf_tensor(mesh, wv, mtf.Shape(
        [mtf.Dimension("f0", 3), ci, co]))
    r = mtf.import_tf_tensor(mesh, rv, mtf.Shape([bb, h, co]))
    y = conv_ops.conv1d(x, w)
    return [y] + list(gradients([mtf.reduce_sum(y * r)], [x, w]))
  check_multi_axis(build, [h, co], meshes=["rows:2;cols:2", "rows:2;cols:4"],
                   limit=6, rtol=1e-4, atol=1e-4)
  _, trace = run(build, "rows:2;cols:4", "h:rows+cols")
  recv = {c.mesh_axes for c in trace.collectives if c.kind == "receive"}
  assert recv == {("rows", "cols")}