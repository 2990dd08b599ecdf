"""A pipelined plan's pipeline in every exporter's output.

:func:`pipeline_record` gives the plan's pipeline decisions -- the stage
axis, stages, chunks, microbatches, schedule, layer split, padded rows and
idle chips -- and, read off the program the plan's fingerprint was taken
of (:func:`autolayout.plans.pipelined.build_program`), each virtual
stage's layers and parameters and the stages each parameter lives on (a
tied embedding lives on the first and the last).  :func:`to_torch`,
:func:`to_jax` and :func:`to_dtensor` turn it into each framework's terms
and list, under ``not_expressible``, what the framework cannot say.  No
framework is imported.
"""

from autolayout.errors import ExportError
from autolayout.plans import decisions as plan_decisions
from autolayout.plans import pipelined
from autolayout.plans.export import common

# torch.distributed.pipelining's schedule class per schedule (torch 2.13).
TORCH_SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B",
                   "interleaved_1f1b": "ScheduleInterleaved1F1B"}


def pipeline_record(plan, rename=None):
  """The JSON-ready record of the module docstring, or None for a plan
  without a pipeline.

  Raises:
    ExportError: if the plan names no zoo model to rebuild its stages
      from.
  """
  if not pipelined.is_pipelined(plan):
    return None
  config = plan_decisions.config_of(plan)
  if config is None:
    raise ExportError(f"pipelined plan of {plan.model.name!r} names no zoo "
                      "model in model.source, so its stages cannot be "
                      "rebuilt; save it with `mtf-layout solve --save`")
  program = pipelined.build_program(config, plan.training)
  names = dict(common.renamed([e.name for e in plan.model.variables],
                              rename))
  value = plan.training.pipeline
  pipe = value.pipeline
  chunks, holders = [], {}
  for c in program.chunks:
    params = [names[v.name] for v in c.variables if v.name in names]
    for p in params:
      holders.setdefault(p, set()).add(c.stage)
    chunks.append({"virtual_stage": c.virtual_stage, "stage": c.stage,
                   "chunk": c.chunk,
                   "layers": [f"layer_{i}" for i in pipe.layers_of(
                       c.stage, c.chunk)],
                   "first": c.virtual_stage == 0,
                   "last": c.virtual_stage == pipe.virtual_stages - 1,
                   "params": params})
  sizes = dict(zip(plan.mesh_shape.dimension_names,
                   plan.mesh_shape.to_integer_list()))
  return {**value.to_dict(), "microbatch_rows": program.microbatch_size,
          "tensor_parallel": sizes.get("model", 1),
          "virtual_stages": chunks,
          "param_stages": {p: sorted(s) for p, s in sorted(holders.items())},
          "tied": {names.get(n, n): list(s)
                   for n, s in sorted(program.tied.items())}}


def _common_missing(rec):
  out = []
  pad = rec["padding"]
  if pad is not None and pad["padded_size"] > pad["real_size"]:
    out.append(f"padding: the plan runs the batch of {pad['real_size']} "
               f"rows as {pad['padded_size']} (whole microbatches) and "
               "masks the padded rows out of the loss; pad the input batch "
               "yourself and mask those rows out of the loss")
  if rec["idle_chips"]:
    out.append(f"idle chips: the plan leaves {rec['idle_chips']} chips "
               "idle; build the device mesh of the used chips only")
  return out


def to_torch(rec):
  """The pipeline in ``torch.distributed.pipelining`` terms: the schedule
  class, ``n_microbatches``, and per pipeline rank (a coordinate of the
  stage mesh dim) its :class:`PipelineStage` objects (``stage_index``: the
  virtual stage) with their layers."""
  missing = _common_missing(rec)
  if rec["tied"]:
    missing.append(
        "tied parameters held by two stages ("
        + ", ".join(f"{n} on stages {s}" for n, s in rec["tied"].items())
        + "): torch.distributed.pipelining does not sum their gradients; "
        "all-reduce them over those ranks of the stage mesh dim before "
        "the optimizer step")
  if rec["scatter_gather"] and rec["tensor_parallel"] > 1:
    missing.append(
        "scatter/gather of stage boundaries: the plan sends 1/t of each "
        "boundary activation per tensor-parallel rank and all-gathers it "
        "on arrival; PipelineStage sends each rank's whole activation")
  ranks = {}
  for c in rec["virtual_stages"]:
    ranks.setdefault(c["stage"], []).append(
        {"stage_index": c["virtual_stage"], "layers": c["layers"],
         "embedding": c["first"], "output_layer": c["last"]})
  return {
      "schedule_class": "torch.distributed.pipelining."
                        + TORCH_SCHEDULES[rec["schedule"]],
      "n_microbatches": rec["microbatches"],
      "num_stages": len(rec["virtual_stages"]),
      "stage_mesh_dim": rec["axis"],
      "split": rec["split"],
      "ranks": [{"pp_rank": r, "stages": s} for r, s in sorted(ranks.items())],
      "how": "for each pp_rank, build each listed stage's submodule (its "
             "layers; the embedding on the first, the final norm and "
             "output layer on the last), wrap it in PipelineStage("
             "submodule, stage_index, num_stages, device, group=the stage "
             "mesh dim's process group), and step schedule_class(stages, "
             "n_microbatches, loss_fn)",
      "not_expressible": missing}


def to_jax(rec):
  """The pipeline for JAX: the stage of each parameter and the schedule
  as data (JAX has no pipeline-schedule API)."""
  return {**{k: rec[k] for k in ("axis", "stages", "chunks", "microbatches",
                                 "schedule", "split", "microbatch_rows",
                                 "param_stages", "tied")},
          "not_expressible": _common_missing(rec) + [
              "the schedule: JAX has no pipeline API; each parameter lives "
              "only on the devices of its stages (param_stages; its "
              "partition_spec leaves the stage axis out), and the "
              f"{rec['schedule']} schedule runs by hand, e.g. shard_map "
              f"over mesh axis {rec['axis']!r} with jax.lax.ppermute for "
              "the boundary sends"]}


def to_dtensor(rec):
  """The pipeline for TF DTensor: the decisions as data, and that DTensor
  has no pipeline parallelism."""
  return {**{k: rec[k] for k in ("axis", "stages", "chunks", "microbatches",
                                 "schedule", "split", "microbatch_rows",
                                 "param_stages", "tied")},
          "not_expressible": _common_missing(rec) + [
              "pipeline parallelism: TF DTensor has no stage API; place "
              "each stage's layers on the sub-mesh of its coordinate on "
              f"mesh dim {rec['axis']!r} and send the boundary tensors "
              "between them (dtensor.copy_to_mesh) in the "
              f"{rec['schedule']} order"]}
