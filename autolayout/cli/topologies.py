"""``mtf-layout topologies``: the preset topologies and their numbers, the
topology files given (``mtf-layout topologies mycpu.json``), and those found
in the working directory and the folders of ``$MTF_TOPOLOGY_PATH``."""

import os

import pandas as pd

import costmodels
from autolayout.cli import output as out
from autolayout.cli import inputs
from autolayout.cli.arguments import add_output_args
from autolayout.cli.context import Answer, Command


def _shape_text(t):
  """``"16x16 torus"``, ``"4x4 mesh"`` or ``"4x8 nvlink4+ib-ndr"``."""
  sizes = "x".join(str(d.size) for d in t.dims)
  if all(d.structure == "switch" for d in t.dims):
    links = "+".join(d.link.name.replace("infiniband-", "ib-")
                     for d in reversed(t.dims) if d.size > 1)
    return f"{sizes} {links}"
  wrap = [d.wraparound for d in t.dims if d.size > 1]
  kind = "torus" if wrap and all(wrap) else "mesh" if not any(wrap) \
      else "partial torus"
  return f"{sizes} {kind}"


def topologies_frame(files=()):
  """One row per preset topology, then per topology file in ``files``:
  chips, chip, HBM, the datasheet bf16 peak FLOP/s and the achievable rate
  the roofline prices large matmuls at (``ChipSpec.achievable_flops_per_s``),
  the chip's own link bandwidth, and its physical shape.

  Raises:
    CliInputError: for a file that is missing or off-schema.
  """
  rows = []
  for name in list(costmodels.list_topologies()) + list(files):
    t = inputs.get_topology(name)
    rows.append({"topology": name, "chips": t.num_chips,
                 "chip": t.chip.name,
                 "hbm_bytes": t.chip.hbm_bytes,
                 "bf16_flops_per_s": t.chip.peak_bf16_flops_per_s,
                 "achievable_bf16_flops_per_s":
                     t.chip.achievable_flops_per_s("bfloat16"),
                 "link_bytes_per_s": t.chip.link.bandwidth_bytes_per_s,
                 "shape": _shape_text(t)})
  return pd.DataFrame(rows).set_index("topology")


def _dims_json(topology_name):
  return [{"name": d.name, "size": d.size,
           "link": d.link.name, "link_kind": d.link.kind,
           "structure": d.structure,
           "wraparound": d.wraparound,
           "bandwidth_bytes_per_s": d.link.bandwidth_bytes_per_s,
           "latency_s": d.link.latency_s}
          for d in inputs.get_topology(topology_name).dims]


def discovered_files(given=(), environ=None):
  """The topology files in the working directory and the folders of
  ``$MTF_TOPOLOGY_PATH`` (``environ``, default ``os.environ``), less those
  in ``given``."""
  from costmodels.calibrate import topology_file
  environ = os.environ if environ is None else environ
  folders = [os.curdir] + [f for f in environ.get(
      topology_file.PATH_ENV, "").split(os.pathsep) if f]
  have = {os.path.realpath(f) for f in given}
  return [os.path.relpath(p) if os.path.dirname(p) == os.curdir else p
          for p in topology_file.discover_topology_files(folders)
          if os.path.realpath(p) not in have]


def _run(args, ctx):
  files = list(args.files)
  if not args.no_discover:
    files += discovered_files(files)
  df = topologies_frame(files)

  def table(ctx):
    view = df.drop(columns=["chip"]).rename(columns={
        "hbm_bytes": "HBM", "link_bytes_per_s": "link"})
    # One column for both rates keeps the table within 80 characters.
    view.insert(list(view.columns).index("bf16_flops_per_s"), "TFLOP/s", [
        f"{p / 1e12:.4g} ({a / 1e12:.4g})" for p, a in zip(
            view["bf16_flops_per_s"], view["achievable_bf16_flops_per_s"])])
    view = view.drop(columns=["bf16_flops_per_s",
                              "achievable_bf16_flops_per_s"])
    out.render(ctx.console, view, "Topologies: presets, then files "
               "(TFLOP/s: datasheet bf16 peak, and in brackets the rate "
               "large bf16 matmuls are priced at; link: the chip's own "
               "link, per direction)",
               formats={"HBM": lambda b: f"{b / 1e9:.3g} GB",
                        "link": out.fmt_rate},
               caption="other sizes of these families also work, e.g. "
               "tpu-v4-8x8x8, h100x8-nodes32, h100x8-nodes4-xdr")

  return Answer(
      json=lambda: {"topologies": [
          {**rec, "dims": _dims_json(rec["topology"])}
          for rec in out.frame_records(df, "topology")]},
      csv=lambda: df, table=table)


def _add_arguments(p):
  p.add_argument("files", nargs="*", metavar="FILE.json",
                 help="topology files (from `mtf-layout calibrate`) to list "
                 "next to the presets (files in the working directory and in "
                 "the folders of $MTF_TOPOLOGY_PATH are listed too)")
  p.add_argument("--no-discover", action="store_true",
                 help="list only the presets and the files given")
  add_output_args(p, plot=False)


COMMAND = Command(
    "topologies", help="list the preset topologies",
    description="The preset topologies: chips, links and their numbers; "
    "and the topology files given.",
    add_arguments=_add_arguments, run=_run,
    timed=False)
