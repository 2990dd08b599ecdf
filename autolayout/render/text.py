"""Words and numbers of the HTML report: the CLI's own formatting
(:mod:`autolayout.cli.output`), the dims each mesh axis carries, and the
comparison table's columns."""

from typing import NamedTuple

from autolayout.cli import output as out

seconds = out.fmt_time
nbytes = out.fmt_bytes


def rate(bytes_per_s):
  return "-" if bytes_per_s is None else out.fmt_rate(bytes_per_s)


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
