"""What the cost model reads off the pipeline trace (shape-only, no
devices): boundary bytes, work per microbatch, work once per step."""

import os
import subprocess
import sys

import pytest

from mesh_tf import models
from mesh_tf.pipeline import (Pipeline, expected_boundary_bytes, stage_costs,
                              trace_pipeline)
from mesh_tf.training import optimize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
MLP = models.MLPConfig(layers=4, batch=16, d_model=8, d_ff=16)


def _trace(m, mesh="stage:2;data:4", rules="batch:data", storage=None,
           schedule="1f1b"):
  pipe = Pipeline("stage", 2, m, MLP.layers, schedule=schedule)
  trace = trace_pipeline(models.mlp_parts(MLP), pipe, mesh, rules,
                         optimize.SgdOptimizer(0.1), storage)
  return pipe, trace


def _update(trace):
  return [s for s in trace.segments if s.step == "update"]


def test_data_parallel_reduction_runs_once_per_step():
  """Gradients accumulate as partial sums over the microbatches and are
  all-reduced over data once, in the update: the same for 2 and 4
  microbatches."""
  (p2, t2), (p4, t4) = _trace(2), _trace(4)
  u2, u4 = _update(t2), _update(t4)
  assert [s.collectives for s in u2] == [s.collectives for s in u4]
  for a in u2:
    assert a.collectives and all(c.kind == "allreduce" and c.mesh_axes == ("data",)
               for c in a.collectives)
  c2, c4 = stage_costs(p2, t2), stage_costs(p4, t4)
  assert [c.step_collective_bytes for c in c2] == [
      c.step_collective_bytes for c in c4]
  # A microbatch of 4 has half the rows of one of 2.
  assert [2 * c.sent_bytes_per_microbatch for c in c4] == [
      c.sent_bytes_per_microbatch for c in c2]
  assert [2 * c.flops_per_microbatch for c in c4] == pytest.approx(
      [c.flops_per_microbatch for c in c2], rel=0.05)


def test_zero3_gathers_repeat_per_microbatch():
  """ZeRO-3 gathers its weights before each microbatch's forward and
  backward: per-microbatch collective bytes; ZeRO-1 gathers once."""
  rules = "batch:data;d_model_storage:data"
  p, t3 = _trace(2, rules=rules, storage=3)
  _, t1 = _trace(2, rules=rules, storage=1)
  c3, c1 = stage_costs(p, t3), stage_costs(p, t1)
  for a, b in zip(c3, c1):
    assert a.collective_bytes_per_microbatch > b.collective_bytes_per_microbatch
  gathers = [c for seg in t3.segments if seg.step not in ("setup", "update")
             for c in seg.collectives if c.kind == "allconcat"]
  assert len(gathers) % p.microbatches == 0 and gathers


def test_gpipe_holds_more_activations_than_1f1b():
  p_g, t_g = _trace(4, schedule="gpipe")
  p_1, t_1 = _trace(4, schedule="1f1b")
  g, o = stage_costs(p_g, t_g), stage_costs(p_1, t_1)
  assert [c.max_in_flight for c in g] == [4, 4]
  assert [c.max_in_flight for c in o] == [2, 1]
  assert g[0].activation_bytes_per_microbatch == \
      o[0].activation_bytes_per_microbatch > 0
  assert g[0].peak_activation_bytes == 4 * g[0].activation_bytes_per_microbatch
  assert o[0].peak_activation_bytes == 2 * o[0].activation_bytes_per_microbatch


@pytest.mark.parametrize("schedule,chunks,traced", [
    ("1f1b", 1, 1), ("gpipe", 1, 2), ("interleaved_1f1b", 2, 2)])
def test_a_few_traced_microbatches_give_the_same_costs(schedule, chunks,
                                                       traced):
  """Every microbatch records the same, so pricing may lower fewer."""
  pipe = Pipeline("stage", 2, 4, MLP.layers, chunks=chunks,
                  schedule=schedule)
  args = (models.mlp_parts(MLP), pipe, "stage:2;data:2;model:2",
          "batch:data;d_ff:model", optimize.SgdOptimizer(0.1))
  full, short = trace_pipeline(*args), trace_pipeline(*args,
                                                      microbatches=traced)
  assert short.pipeline.microbatches == traced
  assert stage_costs(pipe, short) == stage_costs(pipe, full)
  assert len(short.segments) < len(full.segments)


def test_mixed_precision_sends_the_compute_dtype():
  config = models.TransformerConfig(layers=2, batch=8,
                                    param_dtype="bfloat16")
  pipe = Pipeline("stage", 2, 2, 2)
  mesh, rules = "stage:2;data:2;model:2", "batch:data;d_ff:model"
  trace = trace_pipeline(models.transformer_parts(config), pipe, mesh, rules,
                         optimize.SgdOptimizer(0.1))
  expected = expected_boundary_bytes(pipe, "batch:4;length:8;d_model:16",
                                     "bfloat16", mesh, rules)
  assert expected == (4 * 8 * 16 * 2 // 2,) * 2
  assert tuple(c.sent_bytes_per_microbatch
               for c in stage_costs(pipe, trace)) == expected


def test_pricing_a_pipeline_does_not_load_tensorflow():
  code = ("import sys\n"
          "from mesh_tf import models\n"
          "from mesh_tf.pipeline import Pipeline, stage_costs, trace_pipeline\n"
          "from mesh_tf.training import optimize\n"
          "p = Pipeline('stage', 2, 2, 2)\n"
          "t = trace_pipeline(models.TransformerConfig(layers=2), p,\n"
          "                   'stage:2;data:2', 'batch:data',\n"
          "                   optimize.SgdOptimizer(0.1))\n"
          "assert stage_costs(p, t)[0].sent_bytes_per_microbatch > 0\n"
          "print('tensorflow' in sys.modules)\n")
  env = dict(os.environ, PYTHONPATH=ROOT)
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                       capture_output=True, text=True, check=True, timeout=120)
  assert out.stdout.strip() == "False"
