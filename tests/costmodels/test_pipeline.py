"""The pipelined step's price: bubble, in-flight activations, imbalance,
boundary sends, and the stage work measured from the ShapeMeshImpl trace."""

import dataclasses
import itertools

import pytest

from autolayout.training import decisions as dec
from costmodels import pipeline as pipe
from costmodels.evaluate import op_costs, trace_graph
from costmodels.stage_work import price_sync, stage_work
from costmodels.topology import get_topology, map_mesh
from mesh_tf import models
from mesh_tf.pipeline import Pipeline, max_in_flight


def _pipe(p, v, m, schedule=None, layers=None):
  schedule = schedule or ("interleaved_1f1b" if v > 1 else "1f1b")
  return Pipeline("stage", p, m, layers or p * v, v, schedule)


def test_bubble_is_p_minus_one_over_v_m():
  for p, v, m in itertools.product((2, 4, 8), (1, 2, 3), (8, 16)):
    assert pipe.bubble_fraction(_pipe(p, v, m)) == (p - 1) / (v * m)
  assert pipe.bubble_fraction(None) == 0.0


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved_1f1b"])
def test_inflight_closed_form_equals_the_schedule_simulation(schedule):
  """One description: the closed form is the lowering's own schedule."""
  for p, v, m in itertools.product((2, 3, 4, 8), (1, 2, 3),
                                   (1, 2, 4, 8, 16)):
    if (schedule == "interleaved_1f1b") != (v > 1) or (v > 1 and m % p):
      continue
    pl = _pipe(p, v, m, schedule)
    assert tuple(pipe.inflight_microbatches(pl, s) for s in range(p)) == (
        max_in_flight(pl)), (p, v, m)


def test_inflight_activations_by_schedule():
  assert [pipe.inflight_microbatches(_pipe(4, 1, 8, "gpipe"), i)
          for i in range(4)] == [8] * 4
  assert [pipe.inflight_microbatches(_pipe(4, 1, 8), i)
          for i in range(4)] == [4, 3, 2, 1]
  # Megatron's warm-up: (p - i - 1) * 2 + (v - 1) * p + 1 chunks.
  assert pipe.inflight_microbatches(_pipe(4, 2, 8), 0) == 3 * 2 + 4 + 1
  # Fewer microbatches than stages: 1F1B holds at most m.
  assert pipe.inflight_microbatches(_pipe(8, 1, 2), 0) == 2


def _brute_split(layers, groups, e0, e1):
  best = None
  for cut in itertools.combinations(range(1, layers), groups - 1):
    sizes = [b - a for a, b in zip((0,) + cut, cut + (layers,))]
    cost = max(n + (e0 if i == 0 else 0) + (e1 if i == groups - 1 else 0)
               for i, n in enumerate(sizes))
    best = cost if best is None else min(best, cost)
  return best


@pytest.mark.parametrize("layers,groups,e0,e1", [
    (10, 4, 0, 0), (10, 4, 0, 2), (7, 3, 0.5, 1.5), (12, 5, 2.2, 0.3),
    (9, 9, 1, 1), (13, 2, 3, 0)])
def test_layer_split_minimises_the_slowest_group(layers, groups, e0, e1):
  split = pipe.split_layers(layers, groups, e0, e1)
  assert sum(split) == layers and min(split) >= 1 and len(split) == groups
  cost = max(n + (e0 if i == 0 else 0) + (e1 if i == groups - 1 else 0)
             for i, n in enumerate(split))
  assert cost == pytest.approx(_brute_split(layers, groups, e0, e1))


def test_step_is_steady_plus_bubble_plus_step_work():
  w = pipe.StageWork(layer_s=1.0, first_s=0.5, last_s=2.0, layer_step_s=0.1,
                     boundary_bytes=10**6, layer_state_bytes=100,
                     layer_stash_bytes=10, working_bytes=5)

  class Link:
    bandwidth_bytes_per_s, latency_s = 1e9, 0.0
  split = pipe.split_layers(8, 4, 0.5, 2.0)
  c = pipe.price_pipeline(w, Pipeline("stage", 4, 8, 8, split=split), 8,
                          link=Link())
  # Imbalance: the last stage's head makes it the slowest, so the split
  # gives it fewer layers.
  assert c.layers_per_group[-1] < max(c.layers_per_group)
  hop = 1e-3   # the first and last stage send once, the others twice
  slowest = max(n + (0.5 if i == 0 else 0) + (2.0 if i == 3 else 0)
                + hop * (1 if i in (0, 3) else 2)
                for i, n in enumerate(c.layers_per_group))
  assert c.steady_s == pytest.approx(8 * slowest)
  assert c.bubble_s == pytest.approx(c.steady_s * 3 / 8)
  assert c.step_time_s == pytest.approx(
      c.steady_s + c.bubble_s + max(c.layers_per_group) * 0.1)
  # 1F1B: the first stage holds p microbatches' stash, the last one.
  n0, n3 = c.layers_per_group[0], c.layers_per_group[3]
  assert c.stage_memory_bytes[0] == n0 * 100 + 4 * n0 * 10 + 5
  assert c.stage_memory_bytes[3] == n3 * 100 + 1 * n3 * 10 + 5
  gpipe = pipe.price_pipeline(
      w, Pipeline("stage", 4, 8, 8, schedule="gpipe", split=split), 8,
      link=Link())
  assert gpipe.stage_memory_bytes[3] == n3 * 100 + 8 * n3 * 10 + 5
  # Interleaving halves the bubble and doubles the sends.
  inter = pipe.price_pipeline(w, _pipe(4, 2, 8, layers=8), 8, link=Link())
  assert inter.bubble_fraction == pytest.approx(3 / 16)
  assert inter.boundary_s == pytest.approx(4 * hop)


def _config(layers):
  return models.get_config("transformer_tiny", layers=layers, batch=8,
                           d_model=32, d_ff=64, heads=4, d_kv=8, vocab=128)


def _build(recompute=True, batch=4):
  def build(layers):
    cfg = dataclasses.replace(_config(layers), batch=batch)
    d = dec.TrainingDecisions("bfloat16", 0, layers if recompute else 0, 2)
    t = dec.build_training(cfg, d)
    return t.graph, t.plan
  return build


@pytest.mark.parametrize("recompute", [True, False])
def test_stage_work_adds_up_to_the_traced_deeper_model(recompute):
  """L layers of the measured work plus the ends equal the per-microbatch
  price of the L-layer step's own trace, record by record."""
  mesh, rules = "data:2;model:2", "batch:data;heads:model;d_ff:model"
  topo = get_topology("dgx-a100")
  work = stage_work(_build(recompute), mesh, rules,
                    topo._replace(dims=(topo.dims[0], topo.dims[1]._replace(
                        size=4))), data_axes=("data",))
  graph, plan = _build(recompute)(5)
  mapping = map_mesh(topo._replace(dims=(topo.dims[0], topo.dims[1]._replace(
      size=4))), mesh)
  trace = trace_graph(graph, mesh, rules)
  per_mb = sum(c.time_s for c in op_costs(trace, mapping)
               if plan.repeats(c.source_op) > 1
               and not (c.kind == "allreduce" and "data" in c.mesh_axes))
  assert 5 * work.layer_s + work.first_s + work.last_s == pytest.approx(
      per_mb, rel=1e-9)
  assert work.first_s > 0 and work.last_s > work.first_s
  assert work.layer_s > 0
  # The boundary activation is microbatch x length x d_model in bf16,
  # split over the data axis only (the step of batch 4 in 2 microbatches).
  cfg = _config(1)
  assert work.boundary_bytes == 4 // 2 // 2 * cfg.length * cfg.d_model * 2
  # The gradient reduction is once per step: its bytes are the layer's
  # bf16 gradients per device (heads and d_ff split over model:2).
  assert work.layer_sync_bytes > 0


def test_sync_reprices_for_the_data_parallel_size():
  topo = get_topology("a100x8-nodes4")
  sub = topo._replace(dims=(topo.dims[0]._replace(size=1), topo.dims[1]))
  work = stage_work(_build(), "data:2;model:4",
                    "batch:data;heads:model;d_ff:model",
                    sub, data_axes=("data",))
  small = price_sync(work, map_mesh(sub, "data:2;model:4"), ("data",))
  big = price_sync(work, map_mesh(topo, "data:8;model:4"), ("data",))
  one = price_sync(work, map_mesh(sub, "data:1;model:8"), ("data",))
  assert one.layer_sync_s == 0.0
  # Across nodes on InfiniBand, 8 replicas: slower than 2 on NVLink.
  assert big.layer_sync_s > small.layer_sync_s > 0


@pytest.mark.parametrize("stages,chunks,micro,mesh,rules", [
    (2, 1, 2, "stage:2;data:2", "batch:data"),
    (2, 2, 4, "stage:2;data:2;model:2", "batch:data;heads:model;d_ff:model"),
    (4, 1, 4, "stage:4;data:2", "batch:data"),
])
def test_predicted_sends_equal_the_lowerings_records(stages, chunks, micro,
                                                     mesh, rules):
  """The bytes each stage sends and receives per microbatch, as priced,
  equal the send and recv records of the pipeline's own lowering
  (mesh_tf.pipeline, traced on ShapeMeshImpl)."""
  from mesh_tf import optimize
  from mesh_tf.pipeline import stage_costs, trace_pipeline
  layers = 4
  cfg = models.TransformerConfig(layers=layers, batch=8)
  schedule = "interleaved_1f1b" if chunks > 1 else "1f1b"
  pl = Pipeline("stage", stages, micro, layers, chunks, schedule)
  trace = trace_pipeline(models.transformer_parts(cfg), pl, mesh, rules,
                         optimize.SgdOptimizer(0.1))
  recorded = stage_costs(pl, trace)

  def build(n):
    c = dataclasses.replace(cfg, layers=n, batch=2 * 8 // micro)
    d = dec.TrainingDecisions("float32", 0, 0, 2)
    t = dec.build_training(c, d)
    return t.graph, t.plan
  stage_mesh = ";".join(p for p in mesh.split(";")
                        if not p.startswith("stage"))
  from autolayout.training.pipeline_price import sub_topology
  chips = 1
  for part in stage_mesh.split(";"):
    chips *= int(part.split(":")[1])
  work = stage_work(build, stage_mesh, rules,
                    sub_topology(get_topology("dgx-a100"), chips),
                    data_axes=("data",))
  cost = pipe.price_pipeline(work, pl, layers, mesh_shape=mesh,
                             layout_rules=rules)
  assert cost.sent_bytes == tuple(c.sent_bytes_per_microbatch
                                  for c in recorded)
  assert sum(cost.sent_bytes) == sum(c.received_bytes_per_microbatch
                                     for c in recorded)
  assert pipe.bubble_fraction(pl) == (stages - 1) / (chunks * micro)
