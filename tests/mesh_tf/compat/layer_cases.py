"""The first-wave layers (and the transposed convolutions) called as Mesh TF 0.1.21's docs allow, written
once for either library (``m`` is ``mesh_tf`` or ``mesh_tensorflow``), with
the variables Mesh TF made for each call recorded (test_compat_layer_calls
checks ours against the record, and against the original when installed).
"""

import numpy as np

RNG = np.random.RandomState(16)
X3 = RNG.randn(2, 6, 4).astype(np.float32)         # batch, w, c
X4 = RNG.randn(2, 5, 6, 4).astype(np.float32)      # batch, h, w, c
X5 = RNG.randn(2, 3, 5, 6, 4).astype(np.float32)   # batch, d, h, w, c
XE = RNG.randn(2, 3, 6, 4).astype(np.float32)      # batch, e, w, c
K1 = RNG.randn(1, 3, 4, 5).astype(np.float32)
K2 = RNG.randn(3, 2, 4, 5).astype(np.float32)
K2B = RNG.randn(3, 3, 4, 5).astype(np.float32)
K3 = RNG.randn(3, 1, 2, 4, 5).astype(np.float32)
W = RNG.randn(4, 5).astype(np.float32)
WE = RNG.randn(3, 4, 5).astype(np.float32)
# Transposed kernels are TF's [fh, fw, out, in] ([fd, fh, fw, out, in]).
KT2 = RNG.randn(2, 2, 5, 4).astype(np.float32)
KT2B = RNG.randn(3, 3, 5, 4).astype(np.float32)
KT3 = RNG.randn(2, 2, 2, 5, 4).astype(np.float32)
XB = RNG.randn(2, 2, 1, 3, 3, 4).astype(np.float32)      # b, hb, wb, h, w, c
XB3 = RNG.randn(2, 2, 1, 2, 2, 3, 4).astype(np.float32)  # b, db, hb, d, h, w, c


def _dims(m):
  d = m.Dimension
  return dict(b=d("batch", 2), d=d("d", 3), h=d("h", 5), w=d("w", 6),
              c=d("c", 4), e=d("e", 3), o=d("o", 5), ff=d("ff", 7))


def conv1d_positional(m, mesh, imp, init, tf):
  n = _dims(m)
  x = imp(mesh, X3, [n["b"], n["w"], n["c"]])
  return m.layers.conv1d(x, n["o"], 3, 2, padding="SAME",
                         filter_initializer=init(K1))


def conv1d_valid(m, mesh, imp, init, tf):
  n = _dims(m)
  x = imp(mesh, X3, [n["b"], n["w"], n["c"]])
  return m.layers.conv1d(x, n["o"], 3, padding="VALID",
                         filter_initializer=init(K1), name="c1")


def conv2d_positional(m, mesh, imp, init, tf):
  n = _dims(m)
  x = imp(mesh, X4, [n["b"], n["h"], n["w"], n["c"]])
  return m.layers.conv2d(x, n["o"], (3, 2), (1, 1), "VALID", init(K2), None,
                         "c2")


def conv2d_strided(m, mesh, imp, init, tf):
  n = _dims(m)
  x = imp(mesh, X4, [n["b"], n["h"], n["w"], n["c"]])
  return m.layers.conv2d(x, n["o"], (3, 3), (1, 2), "SAME",
                         filter_initializer=init(K2B))


def conv3d_positional(m, mesh, imp, init, tf):
  n = _dims(m)
  x = imp(mesh, X5, [n["b"], n["d"], n["h"], n["w"], n["c"]])
  return m.layers.conv3d(x, n["o"], (3, 1, 2), (1, 1, 1), "SAME", init(K3))


def conv2d_transpose_default(m, mesh, imp, init, tf):
  n = _dims(m)
  x = imp(mesh, X4, [n["b"], n["h"], n["w"], n["c"]])
  return m.layers.conv2d_transpose(x, n["o"], filter_initializer=init(KT2))


def conv2d_transpose_overlapping(m, mesh, imp, init, tf):
  n = _dims(m)
  x = imp(mesh, X4, [n["b"], n["h"], n["w"], n["c"]])
  return m.layers.conv2d_transpose(x, n["o"], (3, 3), (2, 2), "SAME",
                                   init(KT2B), None, "tt")


def conv3d_transpose_positional(m, mesh, imp, init, tf):
  n = _dims(m)
  x = imp(mesh, X5, [n["b"], n["d"], n["h"], n["w"], n["c"]])
  return m.layers.conv3d_transpose(x, n["o"], (2, 2, 2), (2, 2, 2), "SAME",
                                   init(KT3))


def conv2d_transpose_blocks(m, mesh, imp, init, tf):
  d = m.Dimension
  n = _dims(m)
  hb, wb = d("hb", 2), d("wb", 1)
  x = imp(mesh, XB, [n["b"], hb, wb, d("h", 3), d("w", 3), n["c"]])
  return m.layers.conv2d_transpose_with_blocks(
      x, n["o"], (2, 2), (2, 2), "SAME", hb, wb, init(KT2))


def conv3d_transpose_blocks(m, mesh, imp, init, tf):
  d = m.Dimension
  n = _dims(m)
  db, hb = d("db", 2), d("hb", 1)
  x = imp(mesh, XB3, [n["b"], db, hb, d("d", 2), d("h", 2), d("w", 3),
                      n["c"]])
  return m.layers.conv3d_transpose_with_blocks(
      x, n["o"], d_blocks_dim=db, h_blocks_dim=hb,
      filter_initializer=init(KT3), name="t3")


def dense_positional(m, mesh, imp, init, tf):
  n = _dims(m)
  x = imp(mesh, X3, [n["b"], n["w"], n["c"]])
  return m.layers.dense(x, [n["o"]], [n["c"]], None, True, m.relu,
                        tf.float32, tf.float32, None, init(W), None, "d")


def dense_kernel_weights(m, mesh, imp, init, tf):
  n = _dims(m)
  x = imp(mesh, X3, [n["b"], n["w"], n["c"]])
  kw = m.get_variable(mesh, "kw", m.Shape([n["c"], n["o"]]),
                      initializer=init(W))
  return m.layers.dense(x, n["o"], reduced_dims=[n["c"]], kernel_weights=kw)


def dense_variable_dtype(m, mesh, imp, init, tf):
  n = _dims(m)
  x = imp(mesh, X3, [n["b"], n["w"], n["c"]])
  return m.layers.dense(
      x, n["o"], reduced_dims=[n["c"]], use_bias=False,
      variable_dtype=m.VariableDType(tf.float32, tf.float32, tf.float32),
      kernel_initializer=init(W), name="vd")


def dense_bfloat16_slices(m, mesh, imp, init, tf):
  n = _dims(m)
  x = imp(mesh, X3, [n["b"], n["w"], n["c"]])
  # float32 master, bfloat16 slices, float32 activations.
  return m.layers.dense(
      x, n["o"], reduced_dims=[n["c"]], use_bias=False,
      variable_dtype=m.VariableDType(tf.float32, tf.bfloat16, tf.float32),
      kernel_initializer=init(W), name="bf")


def dense_experts(m, mesh, imp, init, tf):
  n = _dims(m)
  x = imp(mesh, XE, [n["b"], n["e"], n["w"], n["c"]])
  return m.layers.dense(x, n["o"], reduced_dims=[n["c"]],
                        expert_dims=[n["e"]], kernel_initializer=init(WE),
                        name="ex")


def dense_relu_dense_positional(m, mesh, imp, init, tf):
  n = _dims(m)
  x = imp(mesh, X3, [n["b"], n["w"], n["c"]])
  # Not training: the dropout of 0.5 does nothing.
  return m.layers.dense_relu_dense(x, n["ff"], False, 0.5, [n["w"]],
                                   tf.float32, tf.float32, "ffn")


def layer_norm_positional(m, mesh, imp, init, tf):
  n = _dims(m)
  x = imp(mesh, X3, [n["b"], n["w"], n["c"]])
  return m.layers.layer_norm(x, n["c"], 1e-3, "ln")


def layer_norm_default_name(m, mesh, imp, init, tf):
  n = _dims(m)
  x = imp(mesh, X3 * 3.0 + 1.0, [n["b"], n["w"], n["c"]])
  return m.layers.layer_norm(x, n["c"])


CASES = {f.__name__: f for f in [
    conv1d_positional, conv1d_valid, conv2d_positional, conv2d_strided,
    conv3d_positional, conv2d_transpose_default, conv2d_transpose_overlapping,
    conv3d_transpose_positional, conv2d_transpose_blocks,
    conv3d_transpose_blocks, dense_positional, dense_kernel_weights,
    dense_variable_dtype, dense_bfloat16_slices, dense_experts,
    dense_relu_dense_positional,
    layer_norm_positional, layer_norm_default_name]}
