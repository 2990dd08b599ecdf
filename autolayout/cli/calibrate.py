"""``mtf-layout calibrate``: measure the devices at hand, write a topology.

Runs :func:`costmodels.calibrate.calibrate` (the measurements run in a
subprocess that imports TensorFlow; this process does not) and prints the
fitted terms with their residuals.  The file it writes (``-o FILE.json``)
is accepted wherever a topology is (``-t FILE.json``) and listed by
``mtf-layout topologies FILE.json``.

Example:
  $ mtf-layout calibrate --cpu-devices 8 -o mycpu.json --quick
  $ mtf-layout solve -m transformer_tiny -t mycpu.json --mesh 'a:2;b:4'
"""

import math

import pandas as pd

from autolayout.cli import output as out
from autolayout.cli.arguments import add_output_args
from autolayout.cli.context import Answer, Command
from autolayout.cli.errors import CliInputError


def _add_arguments(c):
  src = c.add_argument_group("devices (exactly one)")
  src.add_argument("--cpu-devices", type=int, metavar="N",
                   help="N TensorFlow logical CPU devices of this machine")
  src.add_argument("--gpus", type=int, metavar="N",
                   help="N local GPUs")
  src.add_argument("--cluster", metavar="HOST:PORT,...",
                   help="the devices of running mtf-worker tasks")
  src.add_argument("--devices-per-task", type=int, metavar="N",
                   help="with --cluster: devices of each task (the "
                   "workers' --cpu-devices)")
  c.add_argument("--mesh", action="append", metavar="MESH",
                 help="a mesh whose axes are measured; repeat (default: "
                 "x:N, and a:2;b:4 for 8 devices; hosts:P;local:D for a "
                 "cluster)")
  c.add_argument("--output", "-o", required=True, metavar="FILE.json",
                 help="the topology file to write (atomically)")
  c.add_argument("--name", help="the topology's name (default: the file's)")
  c.add_argument("--quick", action="store_true",
                 help="fewer sizes: about 20 s instead of 60 on 2 cores")
  c.add_argument("--timeout", type=float, default=600.0, metavar="S",
                 help="bound on the measurements (default 600 s)")
  add_output_args(c, plot=False)


# A fit whose RMS relative error is above this says nothing about the
# devices: the table says it failed instead of printing the number.
FAILED_RESIDUAL = 1.0
# A rate below these is a fit gone to zero (one seen: an overlap fitted to
# 1.6e-10 GB/s), not a measurement: 1 kB/s, 1 MFLOP/s.
_LEAST_RATE = {"B/s": 1e3, "FLOP/s": 1e6}


def _fmt_rate(x, unit):
  if x is None or x == 0 or x != x:
    return "-"
  if math.isinf(x) or x < _LEAST_RATE.get(unit, 0.0):
    return "not measurable"
  if unit == "x":
    return f"x{x:.3g}"
  if unit == "FLOP/s":
    return f"{x / 1e9:.4g} GFLOP/s"
  return out.fmt_rate(x)


def _fmt_fit(r):
  """The residual in words when it is not a number a person can use."""
  if r is None or r != r or math.isinf(r):
    return "no fit"
  if r > FAILED_RESIDUAL:
    return "failed"
  return out.fmt_pct(r)


def show_fits(ctx, df, title, seconds, path):
  """The fitted terms: one short row each (what, link, latency, rate, fit),
  then each term's detail as a line, and what to do about failed fits."""
  view = pd.DataFrame({
      "what": df["what"], "link": df["link"],
      "latency": [out.fmt_time(s) if s else "-" for s in df["latency_s"]],
      "rate": [_fmt_rate(r, u) for r, u in zip(df["rate"], df["unit"])],
      "fit": [_fmt_fit(r) for r in df["rel_residual"]]})
  out.render(ctx.console, view, title, index=False,
             caption=f"measured in {seconds:.1f} s; fit: RMS relative "
             "error of the fit; written to " + str(path))
  for what, detail in zip(df["what"], df["detail"]):
    if detail:
      ctx.line(f"{what}: {detail}")
  bad = [w for w, r, x, u in zip(df["what"], df["rel_residual"], df["rate"],
                                 df["unit"])
         if _fmt_fit(r) in ("failed", "no fit")
         or _fmt_rate(x, u) == "not measurable"]
  if bad:
    ctx.line()
    ctx.line(f"{len(bad)} fit(s) failed or measured nothing: "
             f"{', '.join(dict.fromkeys(bad))}. The devices were too noisy "
             "or the sizes too few: rerun on an idle machine, without "
             "--quick; the file still prices with the other terms.")


def _run(args, ctx):
  from costmodels import calibrate as cal_lib
  from costmodels.calibrate import topology_file
  try:
    cal = cal_lib.calibrate(
        args.output, meshes=args.mesh, cpu_devices=args.cpu_devices,
        gpus=args.gpus, cluster=args.cluster,
        devices_per_task=args.devices_per_task, quick=args.quick,
        name=args.name, progress=ctx.err if ctx.fmt == "table" else None,
        timeout_s=args.timeout)
  except topology_file.TopologyFileError as e:
    raise CliInputError(str(e), hint="give -o a writable path ending in "
                        ".json, e.g. -o mycpu.json")
  except cal_lib.CalibrationError as e:
    raise CliInputError(str(e), hint="give one of --cpu-devices N, --gpus N "
                        "or --cluster HOST:PORT,... (with --devices-per-task)"
                        ", and meshes of that many devices")
  df = cal.frame()

  def table(ctx):
    show_fits(ctx, df, f"Calibrated {cal.topology.describe()}", cal.seconds,
              cal.path)

  return Answer(
      json=lambda: {"path": cal.path, "measure_seconds": cal.seconds,
                    "topology": topology_file.topology_json(cal.topology),
                    "fits": out.frame_records(df)},
      csv=lambda: df, csv_index=False, table=table)


COMMAND = Command(
    "calibrate", help="measure these devices and write a topology file",
    description="Measure the collectives of every mesh axis, einsum and "
    "elementwise throughput, the cost of a kernel launch and whether the "
    "devices share compute; fit them by least squares and write a topology "
    "file (docs/topology_files.md) that -t/--topology accepts.",
    add_arguments=_add_arguments, run=_run, timed=False)
