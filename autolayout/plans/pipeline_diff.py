"""``diff`` of two plans when either is pipelined: each training decision
that differs priced alone, as :mod:`autolayout.plans.decision_diff` does
for unpipelined plans, but with the pipelined cost model.

B's layout (a :class:`~autolayout.training.pipeline_price.PipelineLayout`
read back from B's mesh and decisions) is priced with **only that
decision** as in A, and B's cost minus that one is the delta of moving the
decision from A's value to B's.  The pipeline family moves A's stages,
chunks, schedule, layer split, microbatches and boundary scatter/gather
at once (the microbatch rows follow A's microbatches on B's data axis; a
stage count A and B do not share changes B's mesh).  Rules and the mesh
follow the layout's tensor and data sizes, so their rows say so instead.
The costs compared are both plans priced again on their own models (an
unpipelined plan with :func:`costmodels.evaluate`, a pipelined one with
:func:`autolayout.plans.pipelined.price`).
"""

from mesh_tf.core.errors import MtfError
from mesh_tf.pipeline.spec import Pipeline
from autolayout.plans import pipelined
from autolayout.plans.diff import Costs, DiffRow, PlanDiff
from autolayout.training import pipeline_price as pp
from autolayout.training.families import TrainingDecisions


def _moved(lay, config, family, a):
  """B's layout ``lay`` with ``family`` as in A's decisions ``a`` (None:
  it cannot be priced on the pipelined model), and the split to price
  with (None: balanced)."""
  if family == "zero_stage":
    if not isinstance(a.zero_stage, int):
      return None, None
    return lay._replace(zero=a.zero_stage), ()
  if family == "recompute":
    if a.recompute not in (0, config.layers):
      return None, None
    return lay._replace(recompute="full" if a.recompute else "none"), ()
  if family == "pipeline" and a.pipeline is not None:
    pipe = a.pipeline.pipeline
    rows = -(-config.batch // (lay.data * pipe.microbatches))
    return lay._replace(stages=pipe.stages, chunks=pipe.chunks,
                        microbatch=rows, schedule=pipe.schedule.value,
                        scatter_gather=a.pipeline.scatter_gather), pipe
  return None, None


def _price(config, topology, lay, pipe):
  """The PredictedCosts of ``lay``; ``pipe``: A's Pipeline whose split to
  keep (when it still fits the microbatches ``lay`` makes)."""
  split = None
  if isinstance(pipe, Pipeline) and pipe.stages == lay.stages and (
      pipe.chunks == lay.chunks):
    split = pipe.split
  return pipelined.costs_of(pp.price_layout(config, topology, lay,
                                            split=split))


def rows(plan_a, plan_b, config, b_costs):
  """``[DiffRow, ...]`` of the decision families A and B differ in, each
  priced alone on B's pipelined layout (module docstring)."""
  default = TrainingDecisions()
  a, b = plan_a.training or default, plan_b.training or default
  lay = pipelined.layout_of(plan_b, config)
  out = []
  for family in TrainingDecisions._fields:
    va, vb = getattr(a, family), getattr(b, family)
    if va == vb:
      continue
    # No pipeline is written "none" (None would read "not split").
    ja = a.as_dict().get(family, "none")
    jb = b.as_dict().get(family, "none")
    moved, pipe = _moved(lay, config, family, a)
    if moved is None:
      why = ("A has no pipeline: B without one is priced by the layout "
             "cost model, not this one" if family == "pipeline" else
             f"A's {family} is not in the pipelined space (bfloat16, one "
             "ZeRO stage, every layer or none recomputed)")
      out.append(DiffRow("decision", family, ja, jb, None,
                         why + "; the total compares the plans"))
      continue
    try:
      delta = b_costs.minus(Costs.of(_price(config, plan_b.topology, moved,
                                            pipe)))
    except MtfError as e:
      out.append(DiffRow("decision", family, ja, jb, None,
                         f"B with only {family} as in A does not price: "
                         f"{str(e).split(';')[0]}"))
      continue
    out.append(DiffRow("decision", family, ja, jb, delta,
                       "B with only this decision as in A, on B's "
                       "pipelined layout"))
  return out


def _costs(plan, config):
  """The plan priced again on its own model."""
  if pipelined.is_pipelined(plan):
    return pipelined.check(plan, config)
  from autolayout.plans import decisions as plan_decisions
  if plan.training is None:
    return plan.costs
  return Costs.from_report(plan_decisions.evaluate(
      plan, plan_decisions.rebuild(plan, config)))


def diff(plan_a, plan_b, config_a, config_b, costs_a=None, costs_b=None):
  """The :class:`~autolayout.plans.diff.PlanDiff` of two plans, one of
  them (or both) pipelined (module docstring); ``config_a``,
  ``config_b``: their zoo configs; ``costs_a``, ``costs_b``: each priced
  again already (:func:`autolayout.plans.pipelined.check`), or None."""
  a_costs = Costs.of(costs_a or _costs(plan_a, config_a))
  b_costs = Costs.of(costs_b or _costs(plan_b, config_b))
  out, notes = [], []
  if plan_a.mesh_shape != plan_b.mesh_shape:
    out.append(DiffRow("mesh", "mesh", plan_a.mesh_shape.text,
                       plan_b.mesh_shape.text, None,
                       "the pipelined layout's stage, data and model "
                       "sizes"))
  if plan_a.topology != plan_b.topology:
    out.append(DiffRow("topology", "topology", plan_a.topology.name,
                       plan_b.topology.name))
  ra, rb = plan_a.rules.as_dict(), plan_b.rules.as_dict()
  for dim in sorted(set(ra) | set(rb)):
    if ra.get(dim) != rb.get(dim):
      out.append(DiffRow("rule", dim, ra.get(dim), rb.get(dim), None,
                         "a pipelined plan's rules follow its data and "
                         "model axes and ZeRO stage"))
  if pipelined.is_pipelined(plan_b):
    out += rows(plan_a, plan_b, config_b, b_costs)
  else:
    a = (plan_a.training or TrainingDecisions()).as_dict()
    b = (plan_b.training or TrainingDecisions()).as_dict()
    for k in sorted(set(a) | set(b)):
      if a.get(k) != b.get(k):
        out.append(DiffRow("decision", k, a.get(k, "none"),
                           b.get(k, "none"), None,
                           "A is pipelined and B is not (two cost models): "
                           "this change is priced only in the total"))
  if any(r.delta is not None for r in out):
    notes.append("each decision's delta is B with only that decision as "
                 "in A, priced by the pipelined cost model; decisions "
                 "interact, so they need not add up")
  return PlanDiff(tuple(out), a_costs, b_costs, tuple(notes), True)
