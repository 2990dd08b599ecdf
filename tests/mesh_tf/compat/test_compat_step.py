"""dynamic_shift and serialize_training_step against NumPy references and
the unserialised step, under several layouts."""

import numpy as np
import pytest

import mesh_tf as mtf
from tests.layout_harness import check_layouts, run

RNG = np.random.RandomState(11)
XV = RNG.randn(4, 8).astype(np.float32)          # a:4, s:8
OFF = np.array([1, -2, 3, 9], np.int32)          # per a


def _np_dynamic_shift(x, off, wrap):
  out = np.zeros_like(x)
  n = x.shape[1]
  for a in range(x.shape[0]):
    for j in range(n):
      src = j - off[a]
      if wrap:
        src %= n
      if 0 <= src < n:
        out[a, j] = x[a, src]
  return out


@pytest.mark.parametrize("wrap", [False, True])
def test_dynamic_shift_matches_numpy_and_differentiates(wrap):
  g_v = RNG.randn(4, 8).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, "a:4;s:8")
    off = mtf.import_tf_tensor(mesh, OFF, "a:4")
    y = mtf.dynamic_shift(x, off, "s", wrap)
    loss = mtf.reduce_sum(y * mtf.import_tf_tensor(mesh, g_v, "a:4;s:8"))
    return [y] + mtf.gradients([loss], [x])

  def ref():
    # The gradient of a shift by k is the shift by -k (zeros stay zeros).
    return [_np_dynamic_shift(XV, OFF, wrap),
            _np_dynamic_shift(g_v, -OFF, wrap)]
  assert check_layouts(build, ["a:4", "s:8"], ref, limit=8) > 8


def test_dynamic_shift_checks_its_arguments():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.zeros(mesh, "a:4;s:8")
  with pytest.raises(mtf.ShapeError, match="may not have the shifted dim"):
    mtf.dynamic_shift(x, mtf.zeros(mesh, "s:8", "int32"), "s", True)
  with pytest.raises(mtf.ShapeError, match="x .* lacks"):
    mtf.dynamic_shift(x, mtf.zeros(mesh, "b:2", "int32"), "s", True)
  with pytest.raises(mtf.DTypeError, match="integer"):
    mtf.dynamic_shift(x, mtf.zeros(mesh, "a:4"), "s", True)
  with pytest.raises(mtf.ShapeError, match="'t' is not a dim"):
    mtf.dynamic_shift(x, mtf.zeros(mesh, "a:4", "int32"), "t", True)


X8 = RNG.randn(8, 4).astype(np.float32)          # batch:8, d:4
Y8 = RNG.randn(8, 2).astype(np.float32)          # batch:8, e:2
W0 = (RNG.randn(4, 2) * 0.5).astype(np.float32)


def _model(features):
  mesh = features["x"].mesh
  w = mtf.get_variable(mesh, "w", "d:4;e:2", initializer=W0)
  pred = mtf.einsum([features["x"], w], output_shape=features["y"].shape)
  err = pred - features["y"]
  return {"loss": mtf.reduce_sum(err * err), "pred": pred}


@pytest.mark.parametrize("splits", [1, 2, 4])
def test_serialized_step_equals_the_whole_batch_step(splits):
  def build(mesh):
    feats = {"x": mtf.import_tf_tensor(mesh, X8, "batch:8;d:4"),
             "y": mtf.import_tf_tensor(mesh, Y8, "batch:8;e:2")}
    grads, outs = mtf.serialize_training_step(feats, _model, "batch",
                                              splits)
    assert len(grads) == len(mesh.graph.trainable_variables) == 1
    return [grads[0], outs["loss"], outs["pred"]]

  def ref():
    pred = X8 @ W0
    err = pred - Y8
    return [2 * X8.T @ err, np.float32((err * err).sum()), pred]
  # A split batch dim splits each microbatch: its size bounds the axes.
  check_layouts(build, [f"batch:{8 // splits}", "d:4", "e:2"], ref,
                rtol=1e-4, atol=1e-4, limit=6)


def test_serialized_step_all_reduces_each_gradient_once():
  def build(mesh):
    feats = {"x": mtf.import_tf_tensor(mesh, X8, "batch:8;d:4"),
             "y": mtf.import_tf_tensor(mesh, Y8, "batch:8;e:2")}
    grads, _ = mtf.serialize_training_step(feats, _model, "batch", 4)
    return grads
  (dw,), trace = run(build, "x:2", "batch:x")
  np.testing.assert_allclose(dw, 2 * X8.T @ (X8 @ W0 - Y8), rtol=1e-4,
                             atol=1e-4)
  loop = [c for c in trace.collectives if c.source_op.startswith("while")]
  assert [(c.kind, c.bytes_per_device) for c in loop] == [
      ("allreduce", 4 * 2 * 4)]


def test_serialize_training_step_checks_its_arguments():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  feats = {"x": mtf.zeros(mesh, "batch:8;d:4")}
  with pytest.raises(mtf.ShapeError, match="num_splits=3"):
    mtf.serialize_training_step(feats, _model, "batch", 3)
  with pytest.raises(mtf.ShapeError, match="no batch dim 'b'"):
    mtf.serialize_training_step(feats, _model, "b", 2)
  with pytest.raises(mtf.MtfError, match="'loss'"):
    mtf.serialize_training_step(feats, lambda f: {"out": f["x"]}, "batch", 2)
