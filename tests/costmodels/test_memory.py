"""Schedule, liveness and peak memory on tiny literal graphs."""

import pytest

import mesh_tf as mtf
from costmodels import memory


def _graph():
  g = mtf.Graph()
  return g, mtf.Mesh(g, "m")


def test_chain_liveness_and_peak():
  g, mesh = _graph()
  c0 = mtf.zeros(mesh, "n:4")            # 16 bytes each
  e1 = mtf.exp(c0)
  e2 = mtf.exp(e1)
  order = memory.schedule(g)
  assert order == [c0.operation, e1.operation, e2.operation]
  assert memory.live_intervals(g, order) == {c0: (0, 1), e1: (1, 2),
                                              e2: (2, 2)}
  assert memory.live_sets(g, order) == [[c0], [c0, e1], [e1, e2]]
  peak, step, breakdown = memory.peak_memory(g, "x:1", "")
  assert (peak, step) == (32, 1)
  assert breakdown == {"params": 0, "gradients": 0, "optimizer": 0,
                       "activations": 32}
  # Split over 2 devices: every slice halves.
  assert memory.peak_memory(g, "x:2", "n:x")[0] == 16


def test_scheduler_finishes_one_branch_before_starting_the_next():
  g, mesh = _graph()
  a = mtf.zeros(mesh, "n:100")            # 400 bytes
  b = mtf.zeros(mesh, "k:100")            # 400 bytes
  sa = mtf.reduce_sum(a)                  # 4 bytes
  sb = mtf.reduce_sum(b)
  out = sa + sb
  order = memory.schedule(g)
  # Graph order holds both big tensors at once; the greedy schedule frees a
  # (by reducing it) before it creates b.
  assert order == [a.operation, sa.operation, b.operation, sb.operation,
                   out.operation]
  assert memory.peak_memory(g, "x:1", "")[0] == 4 + 400 + 4
  assert memory.peak_memory(g, "x:1", "", schedule=g.operations)[0] == (
      400 + 400 + 4)
  assert memory.schedule(g) == order     # deterministic


def test_variables_and_outputs_stay_live_with_categories():
  g, mesh = _graph()
  w = mtf.get_variable(mesh, "w", "d:4,f:8")                      # 128 B
  slot = mtf.get_variable(mesh, "w/m", "d:4,f:8", trainable=False)  # 128 B
  x = mtf.zeros(mesh, "b:2,d:4")                                  # 32 B
  y = mtf.einsum([x, w], mtf.convert_to_shape("b:2,f:8"))         # 64 B
  z = mtf.exp(y)                                                  # 64 B
  upd = mtf.assign(slot, slot * 0.5)                              # 128 B temp
  order = memory.schedule(g)
  assert order[:2] == [w.operation, slot.operation]
  iv = memory.live_intervals(g, order)
  last = len(order) - 1
  assert iv[w] == iv[slot] == (0, last)
  assert iv[z][1] == last                       # an output stays
  sets = memory.live_sets(g, order)
  assert all(w in s and slot in s for s in sets)
  peak, step, bd = memory.peak_memory(g, "x:1", "")
  assert bd["params"] == 128 and bd["optimizer"] == 128
  assert peak == sum(bd.values())
  assert peak == max(sum(memory.tensor_bytes_per_device(t, "x:1", "")
                         for t in s) for s in sets)
  # d_ff split over 2 halves both variables and y, z.
  peak2, _, bd2 = memory.peak_memory(g, "x:2", "f:x")
  assert bd2["params"] == 64 and bd2["optimizer"] == 64
  assert upd.outputs == []


def test_tensor_bytes_per_device_under_layouts():
  g, mesh = _graph()
  w = mtf.get_variable(mesh, "w", "d_model:8,d_ff:32", dtype="bfloat16")
  assert memory.tensor_bytes_per_device(w, "rows:2;cols:4", "") == 8 * 32 * 2
  assert memory.tensor_bytes_per_device(w, "rows:2;cols:4", "d_ff:cols") == (
      8 * 8 * 2)
  assert memory.tensor_bytes_per_device(
      w, "rows:2;cols:4", "d_ff:cols;d_model:rows") == 4 * 8 * 2
  with pytest.raises(mtf.IndivisibleDimError, match=r"tensor 'w' has dim "
                     r"d_model=8, which is not divisible by mesh axis x=3"):
    memory.tensor_bytes_per_device(w, "x:3", "d_model:x")
  with pytest.raises(mtf.UnknownNameError, match="mesh axis 'y'"):
    memory.tensor_bytes_per_device(w, "x:2", "d_ff:y")


def test_depend_orders_after_its_dependencies():
  g, mesh = _graph()
  v = mtf.get_variable(mesh, "v", "n:4")
  upd = mtf.assign(v, v + 1.0)
  x = mtf.zeros(mesh, "n:4")
  y = mtf.depend(x, [upd])
  order = memory.schedule(g)
  assert order.index(upd) < order.index(y.operation)
  assert sorted(op.name for op in order) == sorted(
      op.name for op in g.operations)


def test_schedule_is_never_worse_than_build_order_on_a_training_step():
  from mesh_tf.gradients import gradients
  from mesh_tf.training.optimize import AdamWeightDecayOptimizer
  from tests.costmodels import graphs
  g, mesh = _graph()
  (loss,) = graphs.attention(mesh, layers=3, zeros=True)
  variables = list(g.trainable_variables)
  grads = gradients([loss], [v.outputs[0] for v in variables])
  AdamWeightDecayOptimizer(learning_rate=0.01).apply_grads(grads, variables)
  order = memory.schedule(g)
  assert len(order) == len(g.operations)
  position = {op: i for i, op in enumerate(order)}
  for op in order:        # a topological order
    assert all(position[t.operation] < position[op] for t in op.inputs)
  for layout in ("", "batch:x", "d_ff:x"):
    greedy = memory.peak_memory(g, "x:2", layout, schedule=order)[0]
    built = memory.peak_memory(g, "x:2", layout, schedule=g.operations)[0]
    assert greedy <= built * 1.01, layout


def test_weight_gradients_are_their_own_category():
  g, mesh = _graph()
  x = mtf.zeros(mesh, "b:2,d:8")
  w = mtf.get_variable(mesh, "w", "d:8,f:1024")        # 32 KiB
  loss = mtf.reduce_sum(mtf.einsum([x, w], reduced_dims=[
      mtf.Dimension("d", 8)]))
  [dw] = mtf.gradients([loss], [w])
  assert memory.tensor_category(dw) == "gradients"
  assert memory.tensor_category(w) == "params"
  assert memory.tensor_category(loss) == "activations"
  # The last step computes dw; w, dw and the broadcast upstream gradient
  # (b:2,f:1024 float32, 4 KiB per device, plus x and the loss) are live;
  # the product runs as tf.matmul(transpose_a=True), which copies nothing
  # (costmodels.kernel_copies).
  peak, step, bd = memory.peak_memory(g, "x:2", "f:x", outputs=[loss, dw])
  assert step == len(g.operations) - 1
  assert bd == {"params": 16384, "gradients": 16384, "optimizer": 0,
                "activations": 4096 + 64 + 4}
  assert peak == sum(bd.values())
