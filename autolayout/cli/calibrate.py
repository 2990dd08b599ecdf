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


def _fmt_rate(x, unit):
  if not x:
    return "-"
  if unit == "x":
    return f"x{x:.3g}"
  if unit == "FLOP/s":
    return f"{x / 1e9:.4g} GFLOP/s"
  return out.fmt_rate(x)


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
    view = df.copy()
    view["rate"] = [_fmt_rate(r, u) for r, u in zip(df["rate"], df["unit"])]
    view = view.drop(columns=["unit"]).rename(columns={
        "latency_s": "latency", "rel_residual": "residual"})
    out.render(ctx.console, view, f"Calibrated {cal.topology.describe()}",
               formats={"latency": lambda s: out.fmt_time(s) if s else "-",
                        "residual": out.fmt_pct},
               index=False, justify={"detail": "left"},
               caption=f"measured in {cal.seconds:.1f} s; residual: RMS "
               "relative error of the fit; written to " + str(cal.path))

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
