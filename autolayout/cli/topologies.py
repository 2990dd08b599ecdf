"""``mtf-layout topologies``: the preset topologies and their numbers."""

import pandas as pd

import costmodels
from autolayout.cli import output as out
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


def topologies_frame():
  """One row per preset topology: chips, chip, HBM, peak FLOP/s, the
  chip's own link bandwidth, and its physical shape."""
  rows = []
  for name in costmodels.list_topologies():
    t = costmodels.get_topology(name)
    rows.append({"topology": name, "chips": t.num_chips,
                 "chip": t.chip.name,
                 "hbm_bytes": t.chip.hbm_bytes,
                 "bf16_flops_per_s": t.chip.peak_bf16_flops_per_s,
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
          for d in costmodels.get_topology(topology_name).dims]


def _run(args, ctx):
  del args  # no options but the output's
  df = topologies_frame()

  def table(ctx):
    view = df.drop(columns=["chip"]).rename(columns={
        "hbm_bytes": "HBM", "bf16_flops_per_s": "TFLOP/s",
        "link_bytes_per_s": "link"})
    out.render(ctx.console, view, "Preset topologies (link: the chip's "
               "own link, per direction)",
               formats={"HBM": lambda b: f"{b / 1e9:.3g} GB",
                        "TFLOP/s": lambda f: f"{f / 1e12:.4g}",
                        "link": out.fmt_rate},
               caption="other sizes of these families also work, e.g. "
               "tpu-v4-8x8x8, h100x8-nodes32, h100x8-nodes4-xdr")

  return Answer(
      json=lambda: {"topologies": [
          {**rec, "dims": _dims_json(rec["topology"])}
          for rec in out.frame_records(df, "topology")]},
      csv=lambda: df, table=table)


COMMAND = Command(
    "topologies", help="list the preset topologies",
    description="The preset topologies: chips, links and their numbers.",
    add_arguments=lambda p: add_output_args(p, plot=False), run=_run,
    timed=False)
