"""The answer depends on the hardware: the zoo Transformer LM (forward,
backward and Adam update) on an NVSwitch node and on a multi-node cluster,
and under a shrinking memory budget.  Each claim is checked with the cost
model's numbers for the alternatives.

These claims are about the conservative model, where every collective is
exposed (``overlap=False``); with gradient syncs hidden under the backward
pass, data parallelism wins more often (tests/autolayout/test_overlap.py)."""

import pytest

import autolayout
import costmodels
from mesh_tf.training import optimize
from mesh_tf.gradients import gradients
from mesh_tf.models.transformer import transformer_lm

MODEL_DIMS = {"d_ff", "heads", "vocab", "d_kv", "d_model"}


def _train_graph(**kw):
  cfg = dict(layers=2, d_model=2048, heads=16, d_kv=128, d_ff=8192,
             vocab=32768, length=1024, batch=16)
  cfg.update(kw)
  m = transformer_lm(**cfg)
  grads = gradients([m.loss], m.graph.trainable_variables)
  optimize.AdamWeightDecayOptimizer(1e-4).apply_grads(
      grads, m.graph.trainable_variables)
  return m.graph


@pytest.fixture(scope="module")
def node_graph():
  return _train_graph()


def _time(graph, mesh, rules, topo):
  return costmodels.evaluate(graph, mesh, rules, topo,
                             overlap=False).step_time_s


def test_nvswitch_node_gets_data_and_model_parallelism(node_graph):
  mesh, topo = "data:2;model:4", "dgx-h100"
  r = autolayout.auto_layout(node_graph, mesh, None, topo, overlap=False)
  rules = r.rules.as_dict()
  batch_axis = rules["batch"]
  model_axes = {rules[d] for d in MODEL_DIMS & set(rules)}
  assert model_axes and batch_axis not in model_axes, rules
  # Pure data parallelism (batch, and length on the other axis) and pure
  # model parallelism are both slower, by the cost model's own numbers.
  pure_dp = min(_time(node_graph, mesh, f"batch:{a};length:{b}", topo)
                for a, b in [("data", "model"), ("model", "data")])
  pure_mp = min(_time(node_graph, mesh, f"d_ff:{a};heads:{a};vocab:{a}", topo)
                for a in ("data", "model"))
  # (0.8 before elementwise chains were priced as one memory pass, which
  # makes every layout's compute cheaper and so narrows the gap: 0.83.
  # 0.85 before matmuls were priced at the achievable 80.1% of the H100's
  # peak: both layouts do the same FLOPs per device, so the slower compute
  # is added to both and the ratio narrows again, to 0.851.)
  assert r.step_time_s < 0.87 * pure_dp, (r.step_time_s, pure_dp)
  assert r.step_time_s < 0.6 * pure_mp, (r.step_time_s, pure_mp)
  assert r.report.comm_time_by_axis["data"] > 0
  assert r.report.comm_time_by_axis["model"] > 0


def test_multi_node_cluster_keeps_the_slow_axis_for_data_parallelism():
  graph = _train_graph(batch=64)
  mesh, topo = "node:4;gpu:8", "h100x8-nodes4"
  r = autolayout.auto_layout(graph, mesh, None, topo, overlap=False)
  rules = r.rules.as_dict()
  assert rules["batch"] == "node", rules
  assert {rules[d] for d in MODEL_DIMS & set(rules)} == {"gpu"}, rules
  # The mirror image (model parallelism across nodes over InfiniBand, data
  # parallelism over NVLink) is about twice as slow.
  mirror = ";".join(f"{d}:{'gpu' if a == 'node' else 'node'}"
                    for d, a in rules.items())
  assert _time(graph, mesh, mirror, topo) > 1.5 * r.step_time_s


def test_a_smaller_memory_budget_changes_the_answer(node_graph):
  mesh, topo = "data:2;model:4", "dgx-h100"
  fast = autolayout.auto_layout(node_graph, mesh, None, topo)
  floor = autolayout.search.solve.min_peak_layout(node_graph, mesh, None, topo)[0]
  assert floor < fast.peak_memory_bytes
  budget = (fast.peak_memory_bytes + floor) // 2
  lean = autolayout.auto_layout(node_graph, mesh, None, topo,
                                memory_budget=budget)
  assert lean.rules != fast.rules
  assert lean.peak_memory_bytes <= budget < fast.peak_memory_bytes
  assert lean.step_time_s > fast.step_time_s
  assert lean.status == "optimal"
  with pytest.raises(autolayout.InfeasibleLayoutError) as e:
    autolayout.auto_layout(node_graph, mesh, None, topo,
                           memory_budget=floor - 1)
  assert e.value.min_peak_bytes == floor
