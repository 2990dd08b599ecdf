"""Small graphs the cost-model tests price and lower."""

import numpy as np

import mesh_tf as mtf

RNG = np.random.RandomState(0)


def dims(spec):
  return mtf.convert_to_shape(spec).dims


def mlp(mesh, batch=8, d_model=8, d_ff=16, dtype="float32"):
  """x @ w1 -> relu -> @ w2, summed into a scalar loss-like output."""
  b, d, f = dims(f"batch:{batch},d_model:{d_model},d_ff:{d_ff}")
  x = mtf.import_tf_tensor(mesh, RNG.randn(batch, d_model).astype(dtype),
                           mtf.Shape([b, d]), name="x")
  w1 = mtf.get_variable(mesh, "w1", mtf.Shape([d, f]), dtype)
  w2 = mtf.get_variable(mesh, "w2", mtf.Shape([f, d]), dtype)
  h = mtf.relu(mtf.einsum([x, w1], reduced_dims=[d]))
  y = mtf.einsum([h, w2], reduced_dims=[f])
  return [mtf.reduce_sum(y * y)]


def attention(mesh, batch=4, length=4, memory=4, d_model=8, heads=2, d_kv=4,
              layers=1, zeros=False):
  """Cross-attention blocks (queries from x, keys/values from a memory)
  with a ReLU MLP and residuals: einsum chains, softmax, reductions.
  ``zeros``: constant inputs instead of random imports (for big graphs)."""
  b, s, m, d, h, k, f = dims(
      f"batch:{batch},length:{length},memory:{memory},d_model:{d_model},"
      f"heads:{heads},d_kv:{d_kv},d_ff:{2 * d_model}")
  if zeros:
    x = mtf.zeros(mesh, mtf.Shape([b, s, d]), name="x")
    mem = mtf.zeros(mesh, mtf.Shape([b, m, d]), name="mem")
  else:
    x = mtf.import_tf_tensor(
        mesh, RNG.randn(batch, length, d_model).astype("float32"),
        mtf.Shape([b, s, d]), name="x")
    mem = mtf.import_tf_tensor(
        mesh, RNG.randn(batch, memory, d_model).astype("float32"),
        mtf.Shape([b, m, d]), name="mem")
  init = mtf.random_normal_initializer(stddev=0.3)
  for i in range(layers):
    wq = mtf.get_variable(mesh, f"l{i}_wq", mtf.Shape([d, h, k]),
                          initializer=init)
    wk = mtf.get_variable(mesh, f"l{i}_wk", mtf.Shape([d, h, k]),
                          initializer=init)
    wv = mtf.get_variable(mesh, f"l{i}_wv", mtf.Shape([d, h, k]),
                          initializer=init)
    wo = mtf.get_variable(mesh, f"l{i}_wo", mtf.Shape([h, k, d]),
                          initializer=init)
    w1 = mtf.get_variable(mesh, f"l{i}_w1", mtf.Shape([d, f]),
                          initializer=init)
    w2 = mtf.get_variable(mesh, f"l{i}_w2", mtf.Shape([f, d]),
                          initializer=init)
    q = mtf.einsum([x, wq], reduced_dims=[d])
    kk = mtf.einsum([mem, wk], reduced_dims=[d])
    v = mtf.einsum([mem, wv], reduced_dims=[d])
    logits = mtf.einsum([q, kk], mtf.Shape([b, s, h, m]))
    p = mtf.softmax(logits, m)
    o = mtf.einsum([p, v], mtf.Shape([b, s, h, k]))
    x = x + mtf.einsum([o, wo], mtf.Shape([b, s, d]))
    x = x + mtf.einsum([mtf.relu(mtf.einsum([x, w1], reduced_dims=[d])), w2],
                       reduced_dims=[f])
  return [mtf.reduce_mean(x, output_shape=mtf.Shape([b]))]


def einsum_chain(mesh):
  """a[i,j] b[j,k] c[k,l] -> [i,l], then a max and a sum reduction."""
  i, j, k, l = dims("i:8,j:4,k:8,l:4")
  a = mtf.import_tf_tensor(mesh, RNG.randn(8, 4).astype("float32"),
                           mtf.Shape([i, j]), name="a")
  bb = mtf.get_variable(mesh, "b", mtf.Shape([j, k]))
  c = mtf.get_variable(mesh, "c", mtf.Shape([k, l]))
  ab = mtf.einsum([a, bb], mtf.Shape([i, k]))
  abc = mtf.einsum([ab, c], mtf.Shape([i, l]))
  return [mtf.reduce_max(abc, output_shape=mtf.Shape([l])),
          mtf.reduce_sum(abc, output_shape=mtf.Shape([i]))]
