"""Elementwise chains cost one memory pass: inputs made by an elementwise
producer are not read, outputs read only by elementwise kernels are not
written, a pending all-reduce between two kernels cuts the chain, and both
backends record the same bytes (``run`` checks the traces are equal)."""

import numpy as np

import costmodels as cm
import mesh_tf as mtf
from tests.layout_harness import run

B, D, K = mtf.Dimension("b", 8), mtf.Dimension("d", 16), mtf.Dimension("k", 4)
_rng = np.random.RandomState(5)
XV = _rng.randn(8, 16).astype(np.float32)
YV = _rng.randn(8, 16).astype(np.float32)


def _by_op(trace):
  return {r.op_name: r for r in trace.compute}


def test_a_chain_reads_its_inputs_and_writes_its_result_once():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, D]), name="x")
    y = mtf.import_tf_tensor(mesh, YV, mtf.Shape([B, D]), name="y")
    e = mtf.exp(x, name="e")
    m = mtf.multiply(e, 2.0, name="m")
    a = mtf.add(m, y, name="a")
    return mtf.reduce_sum(a, reduced_dim=D, name="s")
  (v,), trace = run(build, "rows:2;cols:4", "b:rows")
  np.testing.assert_allclose(v, (np.exp(XV) * 2 + YV).sum(1), rtol=1e-5)
  rec = _by_op(trace)
  slice_bytes = 4 * 16 * 4   # [b/2, d] float32
  assert (rec["e"].input_bytes_per_device,
          rec["e"].output_bytes_per_device) == (slice_bytes, 0)
  assert (rec["m"].input_bytes_per_device,
          rec["m"].output_bytes_per_device) == (0, 0)
  # y comes from memory; the sum (a reduction) reads a's result.
  assert (rec["a"].input_bytes_per_device,
          rec["a"].output_bytes_per_device) == (slice_bytes, slice_bytes)
  assert rec["s"].input_bytes_per_device == slice_bytes
  # FLOPs are unchanged: one per element (exp: a few).
  assert rec["m"].flops_per_device == 4 * 16


def test_an_output_is_written_and_a_pending_sum_cuts_the_chain():
  wv = _rng.randn(16, 4).astype(np.float32)
  vv = _rng.randn(16, 4).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, D]), name="x")
    w = mtf.import_tf_tensor(mesh, wv, mtf.Shape([D, K]), name="w")
    v = mtf.import_tf_tensor(mesh, vv, mtf.Shape([D, K]), name="v")
    s = mtf.add(mtf.einsum([x, w], reduced_dims=[D]),
                mtf.einsum([x, v], reduced_dims=[D]), name="s")
    return mtf.exp(s, name="e")
  # d split: both einsums are pending, the add stays pending and the exp
  # forces it, so the exp reads the all-reduced sum from memory.
  (out,), trace = run(build, "rows:2;cols:4", "d:cols")
  np.testing.assert_allclose(out, np.exp(XV @ wv + XV @ vv), rtol=1e-4)
  rec = _by_op(trace)
  assert [c.op_name for c in trace.collectives] == ["e"]
  assert rec["e"].input_bytes_per_device == 8 * 4 * 4
  assert rec["e"].output_bytes_per_device == 8 * 4 * 4   # a result
  # Replicated, nothing is pending: the exp reads the add in registers.
  _, trace = run(build, "rows:2;cols:4", "")
  assert _by_op(trace)["e"].input_bytes_per_device == 0


def test_fusion_lowers_the_predicted_compute_time():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.get_variable(mesh, "x", "b:1024;d:4096")
  h = x
  for i in range(6):
    h = mtf.tanh(h * 1.5 + 0.5, name=f"t{i}")
  loss = mtf.reduce_sum(h)
  r = cm.evaluate(g, "data:8", "b:data", "dgx-h100", outputs=[loss])
  slice_bytes = 1024 // 8 * 4096 * 4
  # One read of x and one write of the last tanh (read by the sum), plus
  # the sum's read: three passes, not 2 * 18.
  moved = sum(c.bytes_per_device for c in r.op_costs
              if c.category == "compute")
  assert moved == 3 * slice_bytes + 4
