"""Words and numbers: how a time, a size or a rate is written (the CLI's
tables, :mod:`autolayout.cli.output`, use the same functions), the dims
each mesh axis carries, and the comparison table's columns."""

import math
from typing import NamedTuple

def fmt_time(seconds, digits=4):
  """``0.02892`` -> ``"28.92 ms"`` (``digits`` significant digits)."""
  if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
    return "-"
  if seconds == 0:
    return "0"
  for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
    if abs(seconds) >= scale:
      return f"{seconds / scale:.{digits}g} {unit}"
  return f"{seconds / 1e-9:.{digits}g} ns"


def fmt_bytes(nbytes, digits=4):
  """``1.5 * 2**30`` -> ``"1.5 GiB"`` (``digits`` significant digits)."""
  if nbytes is None or (isinstance(nbytes, float) and math.isnan(nbytes)):
    return "-"
  for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20),
                      ("KiB", 2**10)):
    if abs(nbytes) >= scale:
      return f"{nbytes / scale:.{digits}g} {unit}"
  return f"{int(nbytes)} B"


def fmt_rate(bytes_per_s):
  if bytes_per_s is None or math.isinf(bytes_per_s):
    return "-"
  return f"{bytes_per_s / 1e9:.4g} GB/s"


def fmt_pct(x):
  return "-" if x is None or (isinstance(x, float) and math.isnan(x)) \
      else f"{x:.1%}"



seconds = fmt_time
nbytes = fmt_bytes


def rate(bytes_per_s):
  return "-" if bytes_per_s is None else fmt_rate(bytes_per_s)


def carried_dims(record):
  """``{mesh axis: (tensor dims, storage dims)}`` of a JSON layout record:
  the dims whose rule uses the axis (alone or in a product ``x+y``);
  storage dims are the sharded-storage copies ``<dim>_storage_<group>``."""
  out_ = {a["axis"]: ([], []) for a in record["axes"]}
  for r in record["rules_list"]:
    axes = r["axis"] if isinstance(r["axis"], list) else \
        str(r["axis"]).split("+")
    for a in axes:
      if a in out_:
        out_[a][1 if "_storage_" in r["dim"] else 0].append(r["dim"])
  return out_


def subject(model, record):
  """The line every figure carries: model, its size, topology, mesh."""
  return (f"{model['description']} | {model['topology']} "
          f"({model['chips']} x {model['chip']}) | mesh {record['mesh']}")


def marked(view):
  return f"* {view.label}" if view.chosen else view.label


class Column(NamedTuple):
  key: str
  title: str
  kind: str            # "time", "bytes", "text"
  sortable: bool = True


COMPARISON = (
    Column("label", "layout", "text", False),
    Column("mesh", "mesh", "text", False),
    Column("rules", "rules", "text", False),
    Column("step_time_s", "step", "time"),
    Column("compute_time_s", "compute", "time"),
    Column("comm_time_s", "exposed comm", "time"),
    Column("hidden_comm_time_s", "hidden comm", "time"),
    Column("interference_time_s", "interference", "time"),
    Column("peak_bytes", "peak memory", "bytes"),
    Column("fits", "fits", "text", False),
)


def comparison_row(view):
  rec = view.record
  return {"label": marked(view), "mesh": rec["mesh"],
          "rules": rec["rules"] or "(replicated)",
          "step_time_s": rec["step_time_s"],
          "compute_time_s": rec["compute_time_s"],
          "comm_time_s": rec["comm_time_s"],
          "hidden_comm_time_s": rec["hidden_comm_time_s"],
          "interference_time_s": rec["interference_time_s"],
          "peak_bytes": rec["memory"]["peak_bytes"],
          "fits": "yes" if rec["memory"]["fits"] else "NO"}


def cell(column, value):
  if value is None:
    return "-"
  if column.kind == "time":
    return seconds(value)
  if column.kind == "bytes":
    return nbytes(value)
  return str(value).replace(";", "; ")
