"""Mesh TensorFlow behaviours of the layers: dense replacing a same-named
dim, conv1d with VALID padding, Mesh TF pooling names -- each against NumPy
under several layouts."""

import numpy as np
import pytest

import mesh_tf as mtf
from tests.layout_harness import check_layouts

MESHES = ["x:2", "rows:2;cols:4"]
RNG = np.random.RandomState(1)


def test_dense_output_dim_named_like_the_input_dim_replaces_it():
  xv = RNG.randn(4, 8).astype(np.float32)
  w0 = RNG.randn(8, 8).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:4;d:8")
    y = mtf.layers.dense(x, mtf.Dimension("d", 8), kernel_initializer=w0,
                         use_bias=False, name="same")
    assert y.shape == mtf.convert_to_shape("b:4;d:8")
    kernel = mesh.graph.all_variables[0]
    assert kernel.shape == mtf.convert_to_shape("_d:8;d:8")
    return [y, mtf.gradients([mtf.reduce_sum(y * y)], [x])[0]]
  y_ref = xv @ w0
  check_layouts(build, ["b:4", "d:8"], lambda: [y_ref, 2 * y_ref @ w0.T],
                meshes=MESHES, limit=8, rtol=1e-4, atol=1e-4)


def test_conv1d_valid_padding():
  xv = RNG.randn(2, 10, 4).astype(np.float32)
  w0 = RNG.randn(3, 4, 6).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:2;l:10;c:4")
    y = mtf.layers.conv1d(x, mtf.Dimension("o", 6), filter_size=3,
                          padding="VALID", filter_initializer=w0,
                          use_bias=False)
    return [y, mtf.gradients([mtf.reduce_sum(y)], [x])[0]]
  y_ref = sum(np.einsum("blc,co->blo", xv[:, k:k + 8], w0[k])
              for k in range(3))
  gx = np.zeros_like(xv)
  for k in range(3):
    gx[:, k:k + 8] += w0[k].sum(-1)
  check_layouts(build, ["b:2", "c:4", "o:6"], lambda: [y_ref, gx],
                meshes=MESHES, limit=8, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind,fn", [("AVG_2D", np.mean), ("MAX_2D", np.max),
                                     ("avg", np.mean)])
def test_pooling_accepts_mesh_tf_names(kind, fn):
  xv = RNG.randn(2, 4, 6, 3).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, xv, "b:2;h:4;w:6;c:3")
    return mtf.PoolOperation(x, ["h", "w"], [2, 3], kind).outputs[0]
  ref = fn(xv.reshape(2, 2, 2, 2, 3, 3), axis=(2, 4))
  check_layouts(build, ["b:2", "c:3"], lambda: ref, meshes=["x:2"],
                rtol=1e-5)


def test_pooling_name_errors():
  mesh = mtf.Mesh(mtf.Graph(), "m")
  x = mtf.ones(mesh, "b:2;h:4;w:4;c:3")
  with pytest.raises(mtf.MtfError, match="AVG_3D.*pools 2 spatial dims; use "
                     "AVG_2D"):
    mtf.PoolOperation(x, ["h", "w"], [2, 2], "AVG_3D")
  with pytest.raises(mtf.MtfError, match="unknown pooling 'SUM_2D'"):
    mtf.PoolOperation(x, ["h", "w"], [2, 2], "SUM_2D")
