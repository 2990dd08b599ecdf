"""``mtf-layout run PLAN.json``: run a plan's training step on the devices
at hand and print what it predicted next to what ran
(:mod:`autolayout.plans.run`)."""

import pandas as pd

from autolayout.errors import PlanError, PlanMismatchError
from autolayout.plans import run as run_lib
from autolayout.cli import inputs, plans
from autolayout.cli import output as out
from autolayout.cli.arguments import add_output_args
from autolayout.cli.context import Answer, Command
from autolayout.cli.errors import CliInputError


def _arguments(p):
  p.add_argument("plan", metavar="PLAN.json", help="a plan file (`mtf-layout"
                 " solve ... --save PLAN.json`) of a zoo model")
  d = p.add_argument_group("devices (default: 8 logical CPU devices)")
  d.add_argument("--cpu-devices", type=int, default=None, metavar="N",
                 help="split this machine's CPU into N TensorFlow devices "
                 "(default 8)")
  d.add_argument("--gpus", action="store_true",
                 help="run on the local GPUs instead")
  d.add_argument("--scale-down", action="store_true",
                 help="when the plan needs more devices than are at hand, "
                 "run it on a smaller mesh with the same axis names and "
                 "rules (each axis divided until it fits)")
  r = p.add_argument_group("steps")
  r.add_argument("--warmup", type=int, default=2, metavar="N",
                 help="untimed steps first (the first one traces; "
                 "default 2)")
  r.add_argument("--steps", type=int, default=5, metavar="N",
                 help="timed steps (default 5)")
  r.add_argument("--eager", action="store_true",
                 help="a pipelined plan's step runs op by op instead of as "
                 "one traced function (the same ops and results; for a "
                 "tiny model the trace takes most of the run)")
  p.add_argument("--topology", "-t", metavar="FILE.json",
                 help="also price the plan on this topology (e.g. `mtf-layout"
                 " calibrate --cpu-devices 8 -o FILE.json` of these devices)")
  add_output_args(p, plot=False)


def _devices(args):
  """``(device names, allocator_peak or None)`` of the devices asked for."""
  from mesh_tf.lowering import placement
  from mesh_tf.lowering.lazy_tf import load_tensorflow
  from mesh_tf.core.errors import MtfError
  if args.gpus:
    if args.cpu_devices is not None:
      raise CliInputError("give --gpus or --cpu-devices, not both",
                          hint="drop --cpu-devices to run on the GPUs")
    tf = load_tensorflow()
    gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    if not gpus:
      raise CliInputError("--gpus: TensorFlow sees no GPU here",
                          hint="drop --gpus to run on logical CPU devices")

    def reset():
      for i in range(len(gpus)):
        tf.config.experimental.reset_memory_stats(f"GPU:{i}")

    def read():
      return [int(tf.config.experimental.get_memory_info(f"GPU:{i}")["peak"])
              for i in range(len(gpus))]
    return gpus, (reset, read)
  n = 8 if args.cpu_devices is None else args.cpu_devices
  if n < 1:
    raise CliInputError(f"--cpu-devices {n}: give at least 1",
                        hint="e.g. --cpu-devices 8")
  try:
    placement.set_logical_cpu_devices(n)
    return placement.logical_cpu_devices(n), None
  except MtfError as e:
    raise CliInputError(str(e), hint="run `mtf-layout run` in a fresh "
                        "process") from None


def _run(args, ctx):
  if args.warmup < 0 or args.steps < 1:
    raise CliInputError(f"--warmup {args.warmup} --steps {args.steps}: "
                        "give --warmup 0 or more and --steps 1 or more",
                        hint="e.g. --warmup 2 --steps 5")
  plan = plans.read(args.plan)
  topology = inputs.get_topology(args.topology) if args.topology else None
  devices, peak = _devices(args)
  try:
    mesh = run_lib.check_devices(plan, len(devices), args.scale_down)
    rep = run_lib.run_plan(plan, devices[:mesh.size], args.warmup,
                           args.steps,
                           None if mesh == plan.mesh_shape else mesh,
                           topology, peak,
                           eager=getattr(args, "eager", False))
  except PlanMismatchError as e:
    raise CliInputError(str(e), hint="solve the plan again with this "
                        "mesh-tf") from None
  except PlanError as e:
    need = plan.mesh_shape.size
    hint = (f"run it on {need} devices (--cpu-devices {need}), or add "
            "--scale-down for a smaller mesh with the same rules"
            if need > len(devices) else "run a plan of a zoo model's "
            "training step")
    raise CliInputError(str(e), hint=hint) from None

  def table(ctx):
    ctx.line(f"run: {args.plan} ({rep.plan_name}) on {len(rep.devices)} "
             f"devices, mesh {rep.mesh}"
             + ("" if rep.mesh == plan.mesh_shape.text else
                f" (scaled down from {plan.mesh_shape.text})"))
    if rep.decisions:
      ctx.line("decisions: " + ", ".join(
          f"{k}={_decision(k, v)}" for k, v in sorted(rep.decisions.items())))
    if rep.pipeline:
      p = rep.pipeline
      ctx.line(f"pipelined step predicted: bubble "
               f"{out.fmt_time(p['bubble_s'])} "
               f"({p['bubble_fraction']:.1%} of the steady "
               f"{out.fmt_time(p['steady_s'])}), boundary sends "
               f"{out.fmt_time(p['boundary_send_s'])} per microbatch, "
               f"microbatches in flight per stage {p['in_flight']}")
    ctx.line(f"{rep.warmup} warm-up steps (the first traced the step in "
             f"{out.fmt_time(rep.first_step_s)}), then "
             f"{len(rep.step_times_s)} timed")
    ctx.line()
    out.render(ctx.console, _frame(rep), "Predicted and measured",
               index=False, caption="state: weights, optimizer state and "
               "gradient accumulators per device")
    ctx.line("loss: " + " -> ".join(f"{x:.4g}" for x in rep.losses)
             + (" (going down)" if rep.loss_went_down else
                " (NOT going down)"))

  return Answer(json=lambda: {"plan": args.plan, **rep.as_dict()},
                csv=lambda: _frame(rep), csv_index=False, table=table)


def _frame(rep):
  rows = [("step time", f"{out.fmt_time(rep.predicted_step_time_s)} on "
           f"{rep.predicted_on}" + (
               f"; {out.fmt_time(rep.repriced_step_time_s)} on "
               f"{rep.repriced_on}" if rep.repriced_on else ""),
           out.fmt_time(rep.measured_step_time_s) + " (median)"),
          ("state per device", out.fmt_bytes(rep.predicted_state_bytes),
           _spread(rep.measured_state_bytes)),
          ("peak per device", out.fmt_bytes(rep.predicted_peak_bytes),
           "n/a (TensorFlow's CPU allocator keeps no statistics)"
           if rep.measured_peak_bytes is None
           else _spread(rep.measured_peak_bytes))]
  return pd.DataFrame(rows, columns=["", "predicted", "measured"])


def _decision(name, value):
  """A decision's text in the table (a pipeline's short form)."""
  if name == "pipeline" and isinstance(value, dict):
    from autolayout.training.pipeline import FAMILY
    return FAMILY.describe(FAMILY.from_json(value))
  return value


def _spread(values):
  lo, hi = min(values), max(values)
  return out.fmt_bytes(hi) if lo == hi else (
      f"{out.fmt_bytes(lo)} .. {out.fmt_bytes(hi)}")


COMMAND = Command(
    "run", help="run a plan's training step here, prediction vs measurement",
    description="Build the training step a plan priced (its zoo model with "
    "its decisions, checked against its fingerprint), run it with "
    "mesh_tf.training.TrainStep on 8 logical CPU devices (--cpu-devices N) "
    "or the local GPUs (--gpus): warm-up steps, then timed steps on one "
    "batch; print the predicted and measured step time and memory per "
    "device, and the loss.", add_arguments=_arguments, run=_run,
    timed=True)
