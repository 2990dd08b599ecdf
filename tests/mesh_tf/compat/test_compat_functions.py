"""Mesh TensorFlow's ops.py functions that mesh-tf composes from its own
ops, against NumPy under several layouts, and its processor helpers."""

import numpy as np
import pytest

import mesh_tf as mtf
from tests.layout_harness import check_layouts, run

MESHES = ["x:2", "rows:2;cols:4"]
RNG = np.random.RandomState(3)
XV = RNG.permutation(64).reshape(4, 16).astype(np.float32)


def _x(mesh):
  return mtf.import_tf_tensor(mesh, XV, "a:4;l:16")


def test_pure_helpers():
  assert mtf.list_product([2, 3, 4]) == 24 and mtf.list_product([]) == 1
  d = mtf.combined_dimension([mtf.Dimension("a", 2), mtf.Dimension("b", 3)])
  assert d == mtf.Dimension("a_b", 6)
  assert mtf.anonymous_shape("a:2;b:3") == mtf.convert_to_shape("_a:2;_b:3")
  mesh, rules = "rows:2;cols:4", "a:cols"
  assert mtf.tensor_dim_to_mesh_dim_size(rules, mesh, "a:8") == 4
  assert mtf.tensor_dim_to_mesh_dim_size(rules, mesh, "b:8") == 1
  assert mtf.tensor_dim_to_size_per_split(rules, mesh, "a:8") == 2
  with pytest.raises(mtf.ShapeError, match="a=6 is not divisible"):
    mtf.tensor_dim_to_size_per_split(rules, mesh, "a:6")
  impl = mtf.ShapeMeshImpl(mesh, "")
  for p in range(8):
    c = mtf.pnum_to_processor_coordinates(mesh, p)
    assert tuple(c) == impl.pnum_to_processor_coordinates(p)
    assert mtf.processor_coordinates_to_pnum(mesh, c) == p
  for axes in ([0], [1], [0, 1], ["cols"]):
    idx = tuple(impl.mesh_axis_index(a) for a in axes)
    assert [tuple(g) for g in mtf.processor_groups(mesh, axes)] == \
        impl.processor_groups(idx)
  assert [mtf.pnum_to_group(mesh, [1], p) for p in range(8)] == [0] * 4 + \
      [1] * 4


def test_reductions_pooling_and_halos():
  def build(mesh):
    x = _x(mesh)
    return [mtf.reduce_first(x, "l"),
            mtf.nth_largest_element(x, 2, "l"),
            mtf.nth_smallest_element(x, 0, "l"),
            mtf.pool_tensor_1d(x, "l", pool_size=4),
            mtf.pool_tensor_1d(x, "l", reduce_fn=mtf.reduce_mean,
                               pool_size=2),
            mtf.stride_tensor_1d(x, "l", pool_size=4),
            mtf.anonymize(x),
            mtf.gradients([mtf.reduce_sum(mtf.pool_tensor_1d(
                x, "l", pool_size=4))], [x])[0]]

  def reference():
    srt = np.sort(XV, axis=1)
    pooled = XV.reshape(4, 4, 4).max(-1)
    grad = (XV == np.repeat(pooled, 4, axis=1)).astype(np.float32)
    return [XV[:, 0], srt[:, -3], srt[:, 0], pooled,
            XV.reshape(4, 8, 2).mean(-1), XV[:, ::4], XV, grad]
  check_layouts(build, ["a:4", "l:16"], reference, meshes=MESHES, limit=6)


def test_left_halo_exchange():
  xv = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:2;blocks:3;block:4")
    return mtf.left_halo_exchange(x, "blocks", "block", 2)
  prev = np.concatenate([np.zeros((2, 1, 4), np.float32), xv[:, :-1]], 1)
  ref = np.concatenate([prev[:, :, -2:], xv], axis=2)
  check_layouts(build, ["b:2", "blocks:3"], lambda: ref, meshes=["x:2",
                                                                 "x:8"])


def test_sample_with_temperature_is_layout_invariant():
  def build(mesh):
    x = _x(mesh)
    return [mtf.sample_with_temperature(x, "l", 0.0),
            mtf.sample_with_temperature(x * 0.1, "l", 1.0, seed=5)]
  # The reference checks the argmax; the harness checks that every layout
  # draws the 1-device sample.
  n = check_layouts(build, ["a:4", "l:16"], lambda: [XV.argmax(1)],
                    meshes=MESHES, limit=6)
  assert n >= 6
  (_, sample), _ = run(build, "all:1", "")
  assert sample.shape == (4,) and not np.array_equal(sample, XV.argmax(1))


def test_errors_name_the_dim():
  mesh = mtf.Mesh(mtf.Graph(), "m")
  x = _x(mesh)
  with pytest.raises(mtf.ShapeError, match="l=16 is not a multiple of "
                     "pool_size=3"):
    mtf.pool_tensor_1d(x, "l", pool_size=3)
  with pytest.raises(mtf.ShapeError, match=r"n=16 is outside \[0, 16\)"):
    mtf.nth_largest_element(x, 16, "l")
  with pytest.raises(mtf.ShapeError, match="has no dim 'q'"):
    mtf.reduce_first(x, "q")


def test_parallel_and_log_variable_sizes():
  import io  # pylint: disable=import-outside-toplevel

  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  devices = mtf.logical_cpu_devices(2)
  out = mtf.parallel(devices, lambda a, b=1.0: tf.identity(a * b),
                     [tf.constant(1.0), tf.constant(2.0)], b=[3.0, 4.0])
  assert [float(t) for t in out] == [3.0, 8.0]
  assert [t.device.endswith(d.split("device:")[-1]) for t, d in
          zip(out, devices)] == [True, True]
  with pytest.raises(mtf.MtfError, match="argument 0 must be a list of 2"):
    mtf.parallel(devices, tf.identity, [1.0])
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  mtf.get_variable(mesh, "w", "a:8;b:4")
  mtf.get_variable(mesh, "v", "a:8")
  log = io.StringIO()
  total = mtf.log_variable_sizes(
      graph.all_variables, tag="model", log_file=log,
      mesh_to_impl={mesh: mtf.ShapeMeshImpl("x:2", "a:x")})
  assert total == 40
  text = log.getvalue()
  assert "model total size: 40" in text and "slice size 16" in text
