"""The caller-owned Liveness plan, frozen reports, and the shared rules
(ring bandwidth, slice sizes) that replaced copies."""

import dataclasses

import pytest

import mesh_tf as mtf
import costmodels
from costmodels import collectives, memory


def _chain():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.zeros(mesh, "n:4,k:8")
  y = mtf.exp(x)
  mtf.reduce_sum(y, reduced_dim=y.shape[1])
  return g


def test_liveness_is_reused_across_layouts():
  g = _chain()
  plan = memory.liveness(g)
  assert plan.schedule == tuple(memory.schedule(g))
  assert {t: (a, b) for t, a, b in plan.intervals} == memory.live_intervals(
      g, memory.schedule(g))
  for mesh, rules in [("x:1", ""), ("x:2", "n:x"), ("x:4", "k:x")]:
    with_plan = memory.memory_profile(g, mesh, rules, liveness_plan=plan)
    fresh = memory.memory_profile(g, mesh, rules)
    assert with_plan.peak_bytes == fresh.peak_bytes
    assert list(with_plan.bytes_by_step) == list(fresh.bytes_by_step)
    r = costmodels.evaluate(g, mesh, rules, _topology(mesh), liveness=plan)
    assert r.peak_memory_bytes == fresh.peak_bytes


def _topology(mesh):
  n = mtf.convert_to_mesh_shape(mesh).size
  return costmodels.gpu_cluster("h100", nodes=1, gpus_per_node=n)


def test_stale_liveness_is_refused():
  g = _chain()
  plan = memory.liveness(g)
  mtf.exp(g.operations[0].outputs[0])
  with pytest.raises(mtf.MtfError, match=r"built for 3 operations but .* "
                                         r"now has 4; build a new one"):
    memory.memory_profile(g, "x:1", "", liveness_plan=plan)


def test_memory_has_no_module_cache():
  assert not hasattr(memory, "_CACHE")


def test_reports_are_frozen():
  g = _chain()
  r = costmodels.evaluate(g, "x:2", "n:x", _topology("x:2"))
  assert isinstance(r.mesh_shape, mtf.MeshShape)
  with pytest.raises(dataclasses.FrozenInstanceError):
    r.step_time_s = 0.0
  with pytest.raises(dataclasses.FrozenInstanceError):
    r.memory.peak_bytes = 0
  assert hash(r) == hash(r) and r == r


def test_one_ring_bandwidth_rule():
  assert collectives.algorithm_bandwidth(10.0, "ring") == 20.0
  assert collectives.algorithm_bandwidth(10.0, "line") == 10.0
  assert collectives.algorithm_bandwidth(10.0, "switch") == 10.0
  for structure in collectives.STRUCTURES:
    link = collectives.LinkParams(4, 10.0, 0.0, structure)
    assert link.algorithm_bandwidth_bytes_per_s == (
        collectives.algorithm_bandwidth(10.0, structure))
    # The formulas run at that bandwidth: (p-1)/p * n / b_alg.
    assert collectives.reduce_scatter_time(400, 4, 10.0, 0.0, structure) == (
        3 / 4 * 400 / collectives.algorithm_bandwidth(10.0, structure))


def test_slice_sizes_is_the_memory_models_rule():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  w = mtf.get_variable(mesh, "w", "a:8,b:12")
  mesh_shape = mtf.convert_to_mesh_shape("x:2;y:3")
  rules = mtf.convert_to_layout_rules("a:x;b:y")
  layout = rules.tensor_layout(w.shape, mesh_shape, w.name)
  assert layout.slice_sizes(w.shape, mesh_shape) == (4, 4)
  assert memory.tensor_bytes_per_device(w, mesh_shape, rules) == 4 * 4 * 4
  impl = mtf.ShapeMeshImpl(mesh_shape, rules)
  assert impl.slice_shape(w) == layout.slice_sizes(w.shape, mesh_shape)


def _long_chain(n):
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  y = mtf.zeros(mesh, "n:4,k:8")
  for _ in range(n):
    y = mtf.exp(y)
  return g


class _Stop(Exception):
  pass


def test_a_check_stops_the_schedule_and_is_called_as_it_goes():
  g = _long_chain(2 * memory._CHECK_EVERY)
  calls = []
  plan = memory.liveness(g, check=lambda: calls.append(1))
  # Twice in the greedy pass, between the phases and before the intervals.
  assert len(calls) >= 4
  assert plan.schedule == tuple(memory.schedule(g))  # the same answer

  def stop():
    raise _Stop
  with pytest.raises(_Stop):
    memory.schedule(g, check=stop)
  with pytest.raises(_Stop):
    memory.liveness(g, check=stop)
