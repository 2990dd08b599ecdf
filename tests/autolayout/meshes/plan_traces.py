"""The collectives a pipelined plan's step lowers to, for tests that
compare a plan's priced bytes with its lowered trace."""

from autolayout.plans import pipelined
from mesh_tf.pipeline import trace_pipeline
from mesh_tf.training import optimize


def plan_collectives(cfg, price, plan, storage=3):
  """``(segment, collective, source op name)`` of every collective of the
  shape-only lowering of ``plan`` (priced as ``price``) of the Transformer
  ``cfg``, SGD, ZeRO ``storage``, in trace order."""
  trace = trace_pipeline(pipelined.step_config(cfg, plan.training).parts(),
                         price.cost.pipeline, plan.mesh_shape, plan.rules,
                         optimize.SgdOptimizer(0.1), storage=storage)
  for seg in trace.segments:
    for c in seg.collectives:
      yield seg, c, c.source_op or c.op_name
