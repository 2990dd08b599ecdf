"""A pipelined plan file read by ``report -l @plan.json`` (and drawn by
``--html``): the plan priced again with the pipelined cost model
(:mod:`autolayout.plans.pipelined`), its time decomposition (compute, the
boundary sends, the bubble, the once-per-step work) and per stage its
layers, time per microbatch, bytes sent, microbatches in flight and peak
memory, next to what the file predicted."""

import math

import pandas as pd

from costmodels import hardware
from costmodels.topology import map_mesh
from autolayout.errors import PlanFormatError
from autolayout.plans import decisions as plan_decisions
from autolayout.plans import pipelined
from autolayout.training import pipeline_price as pp
from autolayout.cli import plans
from autolayout.cli import output as out
from autolayout.cli.context import Answer
from autolayout.cli.errors import CliInputError


def read(text):
  """The pipelined plan of a ``@plan.json`` argument, or None for any
  other layout argument or plan (read and checked by
  :func:`autolayout.cli.plans.read`)."""
  if not isinstance(text, str) or not plans.is_ref(text):
    return None
  plan = plans.read(plans.ref_path(text))
  return plan if pipelined.is_pipelined(plan) else None


def config_for(plan, path, args=None):
  """``(zoo config, repriced PredictedCosts)`` of a pipelined plan: its
  source's config, or ``--model`` / ``--set``'s, held against the plan
  (:func:`autolayout.plans.pipelined.check`: every pipeline field and the
  fingerprint).

  Raises:
    CliInputError: for a plan naming no zoo model, or another model.
  """
  from mesh_tf import models
  from autolayout.cli.models import parse_overrides
  model = getattr(args, "model", None)
  try:
    if model:
      config = models.get_config(model, **parse_overrides(args.set))
    else:
      config = plan_decisions.config_of(plan)
    if config is None:
      raise PlanFormatError(f"pipelined plan {path!r} names no zoo model "
                            "in model.source")
    if model:
      costs = pipelined.check(plan, config, f"the step of -m {model}")
    else:
      # plans.read checked the plan's program against its fingerprint.
      costs = pipelined.costs_of(pipelined.price(plan, config))
  except PlanFormatError as e:
    raise CliInputError(str(e), hint=plans.FORMAT_HINT) from None
  except plans.PlanMismatchError as e:
    raise CliInputError(str(e), hint=f"solve again; `mtf-layout solve "
                        f"--hint {path}` starts from the plan") from None
  return config, costs


def record(plan, costs, label="plan"):
  """The JSON layout record (:func:`autolayout.cli.output.layout_record`'s
  keys) of a pipelined plan's ``costs``, with ``bubble_time_s`` (a term
  of the step), on devices that share a host's cores
  ``core_sharing_time_s`` (subtracted from the step,
  :mod:`costmodels.shared_cores`), and the ``pipeline`` terms."""
  terms = costs.pipeline_terms
  mem = dict(costs.memory_by_category)
  topo = pp.sub_topology(plan.topology, plan.mesh_shape.size)
  mapping = map_mesh(topo, plan.mesh_shape)
  hbm = int(hardware.get_chip(plan.topology.chip).hbm_bytes)
  usable = int(hardware.usable_memory_bytes(plan.topology.chip))
  comm = dict(costs.comm_time_by_axis)
  return {
      "label": label, "mesh": plan.mesh_shape.text,
      "mesh_axes": [{"name": d.name, "size": d.size}
                    for d in plan.mesh_shape.dims],
      "rules": str(plan.rules),
      "rules_list": [{"dim": d, "axis": a} for d, a in plan.rules.pairs],
      "topology": plan.topology.name,
      "step_time_s": costs.step_time_s,
      "compute_time_s": costs.compute_time_s,
      "comm_time_s": costs.comm_time_s,
      "comm_time_by_axis_s": comm,
      "bubble_time_s": terms["bubble_s"],
      # Devices that share a host's cores: the step is compute + comm +
      # bubble less what the waiting stages' cores gain the others.
      **({"core_sharing_time_s": terms["core_sharing_s"]}
         if "core_sharing_s" in terms else {}),
      "hidden_comm_time_s": 0.0, "hidden_comm_time_by_axis_s": {},
      "interference_time_s": 0.0, "overlap_by_axis_s": {},
      "overlap": False,
      "memory": {
          "params_bytes": mem.get("weights_and_optimizer", 0),
          "gradients_bytes": mem.get("gradients", 0),
          "optimizer_bytes": 0,
          "activations_bytes": mem.get("activations_in_flight", 0)
                               + mem.get("working", 0),
          "kv_cache_bytes": 0, "peak_bytes": costs.peak_memory_bytes,
          "hbm_bytes": hbm, "usable_bytes": usable,
          "memory_reserve_fraction": 1 - usable / hbm if hbm else 0.0,
          "fits": costs.peak_memory_bytes <= usable},
      "axes": [{"axis": a.axis, "size": a.size, "link": a.link_kind,
                "structure": a.structure,
                # A one-device axis has no link (infinite bandwidth).
                "bandwidth_bytes_per_s": (
                    a.bandwidth_bytes_per_s
                    if math.isfinite(a.bandwidth_bytes_per_s) else None),
                "latency_s": a.latency_s,
                "comm_time_s": comm.get(a.axis, 0.0),
                "hidden_comm_time_s": 0.0} for a in mapping.axes],
      "solver": plan.solver.as_dict(),
      "decisions": plan.decisions,
      "pipeline": {k: list(v) if isinstance(v, tuple) else v
                   for k, v in costs.pipeline},
  }


def stage_frame(plan, costs):
  """One row per stage: its layers, seconds per microbatch, bytes sent per
  microbatch, microbatches in flight and peak bytes."""
  t = costs.pipeline_terms
  pipe = plan.training.pipeline.pipeline
  return pd.DataFrame([{
      "stage": i,
      "layers": sum(len(pipe.layers_of(i, c)) for c in range(pipe.chunks)),
      "time_per_microbatch_s": t["stage_times_s"][i],
      "sent_bytes_per_microbatch": t["sent_bytes"][i],
      "in_flight": t["in_flight"][i],
      "peak_bytes": t["stage_memory_bytes"][i]} for i in range(pipe.stages)])


def report(args, ctx, plan):
  """The Answer of ``report -l @plan.json`` on a pipelined plan."""
  path = plans.ref_path(args.layout)
  config, costs = config_for(plan, path, args)
  stored = plan.costs
  rec = record(plan, costs)
  stages = stage_frame(plan, costs)
  t = costs.pipeline_terms
  pipe = plan.training.pipeline

  def table(ctx):
    ctx.line(f"report: {plan.model.name} on {plan.topology.name}, mesh "
             f"{plan.mesh_shape.text} (the plan's: {path})")
    ctx.line(f"pipelined plan: {plan.training.describe()}")
    ctx.line(f"rules: {plan.rules or '(replicated)'}")
    ctx.line(f"idle chips {pipe.idle_chips}, padded rows "
             f"{pipe.padded_rows}")
    ctx.line()
    rows = pd.DataFrame([
        ("compute (steady work + once-per-step work)", costs.compute_time_s),
        ("boundary sends (stage axis)", costs.comm_time_s),
        (f"bubble ({t['bubble_fraction']:.1%} of the steady time)",
         t["bubble_s"])]
        + ([("cores that waiting stages leave to the others (shared "
             "cores)", -t["core_sharing_s"])] if "core_sharing_s" in t
           else [])
        + [("step", costs.step_time_s)], columns=["term", "seconds"])
    out.render(ctx.console, rows, "Step time (pipelined cost model)",
               index=False, formats={"seconds": out.fmt_time})
    view = stages.rename(columns={
        "time_per_microbatch_s": "per microbatch",
        "sent_bytes_per_microbatch": "sent", "in_flight": "in flight",
        "peak_bytes": "peak"})
    out.render(ctx.console, view, "Stages (per microbatch: time and bytes "
               "sent; microbatches in flight; peak memory)", index=False,
               formats={"per microbatch": out.fmt_time,
                        "sent": out.fmt_bytes, "peak": out.fmt_bytes})
    mem = pd.DataFrame(sorted(costs.memory_by_category),
                       columns=["category", "bytes"])
    out.render(ctx.console, mem, "Memory of the busiest stage",
               index=False, formats={"bytes": out.fmt_bytes})
    same = (abs(costs.step_time_s - stored.step_time_s)
            <= 1e-9 * stored.step_time_s
            and costs.peak_memory_bytes == stored.peak_memory_bytes)
    ctx.line(f"the plan file predicted step {out.fmt_time(stored.step_time_s)}"
             f", peak {out.fmt_bytes(stored.peak_memory_bytes)}: "
             + ("the same" if same else "priced differently now"))

  return Answer(
      json=lambda: {"model": model_json(plan, config),
                    "result": rec, "stages": stages.to_dict("records"),
                    "stored": stored.as_dict()},
      csv=lambda: stages, csv_index=False, table=table,
      views=lambda payload: _views(payload))


def model_json(plan, config):
  """The payload's ``model`` record (:func:`autolayout.cli.common.
  model_json`'s keys) of a pipelined plan."""
  chip = plan.topology.chip
  src = plan_decisions.source_of(plan) or {}
  return {"name": plan.model.name,
          "description": f"{plan.model.name}: pipelined training step, "
                         f"{config.layers} layers, "
                         f"{plan.training.describe()}",
          "overrides": dict(src.get("overrides") or {}),
          "ops": plan.model.num_ops, "topology": plan.topology.name,
          "chips": plan.topology.num_chips, "chip": chip.name,
          "peak_bf16_flops_per_s": chip.peak_bf16_flops_per_s,
          "achievable_bf16_flops_per_s":
              chip.achievable_flops_per_s("bfloat16")}


def _views(payload):
  from autolayout.render.views import layout_view
  return [layout_view("plan", payload["result"], None, chosen=True)]


def summary_row(plan, costs, label):
  """The ``compare`` row of a pipelined plan
  (:func:`autolayout.cli.output.summary_row`'s keys, and ``bubble_time_s``,
  a term of its step)."""
  rec = record(plan, costs, label)
  mem = rec["memory"]
  row = {"layout": label, "mesh": rec["mesh"], "rules": rec["rules"],
         "step_time_s": rec["step_time_s"],
         "compute_time_s": rec["compute_time_s"],
         "comm_time_s": rec["comm_time_s"],
         "interference_time_s": 0.0,
         "bubble_time_s": rec["bubble_time_s"]}
  for a, t in rec["comm_time_by_axis_s"].items():
    row[f"comm_{a}_s"] = t
  row.update(peak_memory_bytes=int(mem["peak_bytes"]),
             hbm_bytes=int(mem["hbm_bytes"]),
             usable_memory_bytes=int(mem["usable_bytes"]),
             fits=bool(mem["fits"]))
  return row


def _why_alt(a, base):
  """One sentence for an :class:`~autolayout.plans.pipeline_explain.
  Alternative` against the plan's ``base`` costs."""
  head = f"{a.decision} {a.chosen} -> {a.alternative}: "
  if a.step_time_s is None:
    return head + f"no such layout here ({a.why})"
  dt = a.step_time_s - base.step_time_s
  dm = a.peak_memory_bytes - base.peak_memory_bytes
  step = ("the same step" if dt == 0 else
          f"the step {out.fmt_time(abs(dt))} "
          f"{'slower' if dt > 0 else 'faster'}")
  mem = ("the same peak" if dm == 0 else
         f"{out.fmt_bytes(abs(dm))} {'more' if dm > 0 else 'less'} per "
         "device")
  fits = "" if a.fits else ", over the usable memory"
  return head + f"{step}, {mem}{fits}"


def explain(args, ctx, plan):
  """The Answer of ``explain -l @plan.json`` on a pipelined plan: each
  decision moved to its neighbours on the same chips and priced again
  (:func:`autolayout.plans.pipeline_explain.alternatives`)."""
  from autolayout.plans import pipeline_explain
  path = plans.ref_path(args.layout)
  config, costs = config_for(plan, path, args)
  lay = pipelined.layout_of(plan, config)
  usable = int(hardware.usable_memory_bytes(plan.topology.chip))
  with ctx.progress("pricing each decision's alternatives"):
    alts = pipeline_explain.alternatives(config, plan.topology, lay, usable)
  frame = pd.DataFrame([{
      "decision": a.decision, "chosen": a.chosen,
      "alternative": a.alternative,
      "step_time_s": a.step_time_s, "peak_memory_bytes": a.peak_memory_bytes,
      "fits": a.fits, "why_not_priced": a.why or None} for a in alts])

  def table(ctx):
    ctx.line(f"explain: {plan.model.name} on {plan.topology.name}, mesh "
             f"{plan.mesh_shape.text} (the plan's: {path})")
    ctx.line(f"pipelined plan: {plan.training.describe()}")
    ctx.line(f"layout {lay.describe()}: step "
             f"{out.fmt_time(costs.step_time_s)}, peak "
             f"{out.fmt_bytes(costs.peak_memory_bytes)}")
    ctx.line()
    rows = pd.DataFrame([{
        "decision": a.decision, "chosen": a.chosen, "instead": a.alternative,
        "step": (out.fmt_delta(a.step_time_s, costs.step_time_s)
                 if a.step_time_s is not None else "-"),
        "peak": ("-" if a.peak_memory_bytes is None else
                 ("+" if a.peak_memory_bytes >= costs.peak_memory_bytes
                  else "-") + out.fmt_bytes(abs(
                      a.peak_memory_bytes - costs.peak_memory_bytes))),
        "fits": {True: "yes", False: "NO", None: "-"}[a.fits]}
        for a in alts])
    out.render(ctx.console, rows, "Each decision vs. its neighbours on the "
               "same chips (pipelined cost model)", index=False,
               caption="step and peak: the change from the plan's")
    for a in alts:
      ctx.line(_why_alt(a, costs))

  return Answer(
      json=lambda: {"model": model_json(plan, config),
                    "result": record(plan, costs),
                    "decisions": out.frame_records(frame)},
      csv=lambda: frame, csv_index=False, table=table)


__all__ = ["config_for", "explain", "model_json", "read", "record", "report", "stage_frame",
           "summary_row"]
