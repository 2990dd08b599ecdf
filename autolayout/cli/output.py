"""Output of the ``mtf-layout`` CLI: pandas tables, their rich rendering,
and the stable JSON records (schema in ``docs/cli.md``).

Every table is built as a pandas DataFrame first; :func:`render` shows it
with rich (numbers formatted, best values marked), ``--format csv`` writes
the same DataFrame with raw SI numbers (seconds, bytes), and ``--format
json`` writes the records of :func:`layout_record` and friends.
"""

import math

import pandas as pd

# Numbers as words, shared with the HTML report.
from autolayout.render.text import (fmt_bytes, fmt_pct, fmt_rate,  # noqa: F401
                                    fmt_time)

SCHEMA = "mtf-layout/1"
CATEGORIES = ("params", "gradients", "optimizer", "activations")


# --- formatting --------------------------------------------------------------
def fmt_delta(new, base):
  """``"+3.1 ms (+12%)"``: how ``new`` differs from ``base`` (seconds)."""
  if new is None or base is None or (isinstance(new, float)
                                     and math.isnan(new)):
    return "-"
  d = new - base
  rel = f" ({d / base:+.0%})" if base else ""
  return ("+" if d >= 0 else "-") + fmt_time(abs(d)) + rel


def wrap_rules(rules):
  """Rules with a space after each ``;`` so long ones wrap between rules
  in a table cell."""
  return str(rules).replace(";", "; ")


def parse_bytes(text, hbm_bytes=None):
  """``"16GB"``, ``"12GiB"``, ``"512MiB"``, ``"1e9"``, ``"90%"`` (of
  ``hbm_bytes``), ``"hbm"`` or ``"none"`` -> bytes (or None).

  The CLI passes the *usable* HBM (exposed capacity less the reserve) as
  ``hbm_bytes``.

  Raises:
    ValueError: for anything else.

  Example:
    >>> parse_bytes("1.5GiB")
    1610612736
  """
  s = str(text).strip().lower().replace(" ", "")
  if s in ("none", "inf", "unlimited"):
    return None
  if s == "hbm":
    return hbm_bytes
  if s.endswith("%"):
    if hbm_bytes is None:
      raise ValueError(f"{text!r}: a percentage needs a topology")
    return int(float(s[:-1]) / 100 * hbm_bytes)
  units = (("kib", 2**10), ("mib", 2**20), ("gib", 2**30), ("tib", 2**40),
           ("kb", 10**3), ("mb", 10**6), ("gb", 10**9), ("tb", 10**12),
           ("b", 1))
  for suffix, scale in units:  # noqa: B007  (scale is read after the loop)
    if s.endswith(suffix):
      value = float(s[:-len(suffix)])
      break
  else:
    value, scale = float(s), 1
  if not math.isfinite(value) or value <= 0:
    raise ValueError(f"{text!r} is not a positive size")
  return int(value * scale)


# --- JSON records ------------------------------------------------------------
def _num(x):
  if x is None:
    return None
  if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
    return None
  return x


def _overlap_by_axis(report):
  """Per axis, the overlappable communication: gradient syncs and
  prefetched parameter gathers, total and exposed (seconds)."""
  df = report.to_dataframe("axes")
  cols = ["sync_time_s", "exposed_sync_time_s", "prefetch_time_s",
          "exposed_prefetch_time_s", "interference_time_s"]
  return {a: {c: float(df.loc[a, c]) for c in cols} for a in df.index}


def axes_frame(report):
  """One row per mesh axis: size, link, structure, bandwidth, comm time."""
  df = report.to_dataframe("axes")
  return df[["size", "link", "structure", "bandwidth_bytes_per_s",
             "latency_s", "collectives", "bytes_per_device", "comm_time_s",
             "hidden_comm_time_s"]]


def _categories(report):
  """The fixed categories, then any further ones the report has (e.g.
  ``kv_cache``)."""
  return list(CATEGORIES) + [c for c in report.memory_by_category
                             if c not in CATEGORIES]


def memory_frame(report):
  """Rows params / gradients / optimizer / activations (and kv_cache...) /
  peak / usable / hbm (bytes per device, and fraction of HBM).  ``usable``
  is the HBM less the reserve for the runtime and fragmentation."""
  rows = [{"category": c, "bytes_per_device":
           int(report.memory_by_category.get(c, 0))}
          for c in _categories(report)]
  rows.append({"category": "peak",
               "bytes_per_device": int(report.peak_memory_bytes)})
  rows.append({"category": (f"usable ({report.memory_reserve_fraction:.0%} "
                            "reserve)"),
               "bytes_per_device": int(report.usable_memory_bytes)})
  rows.append({"category": "hbm", "bytes_per_device": int(report.hbm_bytes)})
  df = pd.DataFrame(rows).set_index("category")
  df["fraction_of_hbm"] = df["bytes_per_device"] / report.hbm_bytes
  return df


def layout_record(report, result=None, label=None, training=None):
  """The JSON record of one layout's cost (see ``docs/cli.md``)."""
  rec = {
      "label": label,
      "mesh": str(report.mesh_shape).replace(",", ";"),
      "mesh_axes": [{"name": d.name, "size": d.size}
                    for d in report.mesh_shape.dims],
      "rules": str(report.layout_rules),
      "rules_list": [{"dim": d, "axis": a}
                     for d, a in report.layout_rules.pairs],
      "topology": report.topology.name,
      "step_time_s": report.step_time_s,
      "compute_time_s": report.compute_time_s,
      "comm_time_s": report.comm_time_s,
      "comm_time_by_axis_s": dict(report.comm_time_by_axis),
      "hidden_comm_time_s": report.hidden_comm_time_s,
      "hidden_comm_time_by_axis_s": dict(report.hidden_comm_time_by_axis),
      "interference_time_s": report.interference_time_s,
      "overlap_by_axis_s": _overlap_by_axis(report),
      "overlap": bool(report.overlap is not None and report.overlap.enabled),
      "flops_per_device": int(report.flops_per_device),
      "memory": {
          "params_bytes": int(report.memory_by_category.get("params", 0)),
          "gradients_bytes": int(report.memory_by_category.get("gradients",
                                                               0)),
          "optimizer_bytes": int(report.memory_by_category.get("optimizer",
                                                               0)),
          "activations_bytes": int(report.memory_by_category.get(
              "activations", 0)),
          "kv_cache_bytes": int(report.memory_by_category.get("kv_cache",
                                                              0)),
          "peak_bytes": int(report.peak_memory_bytes),
          "hbm_bytes": int(report.hbm_bytes),
          "memory_reserve_fraction": report.memory_reserve_fraction,
          "usable_bytes": int(report.usable_memory_bytes),
          "fits": bool(report.fits_in_memory),
      },
      "axes": [
          {"axis": a.axis, "size": a.size, "link": a.link_kind,
           "structure": a.structure,
           "bandwidth_bytes_per_s": _num(a.bandwidth_bytes_per_s),
           "latency_s": a.latency_s,
           "comm_time_s": report.comm_time_by_axis.get(a.axis, 0.0),
           "hidden_comm_time_s": report.hidden_comm_time_by_axis.get(
               a.axis, 0.0)}
          for a in report.mapping.axes],
      "solver": None,
  }
  if training is not None:
    rec["training"] = training
  if result is not None:
    rec["solver"] = {
        "objective": result.objective,
        "objective_value": result.objective_value,
        "status": result.status,
        "gap": result.gap,
        "best_bound": result.best_bound,
        "solve_time_s": result.solve_time_s,
        "build_time_s": result.build_time_s,
        "memory_budget_bytes": result.memory_budget,
        "model_size": result.model_size.as_dict(),
    }
  return rec


def summary_row(report, result=None, label=None):
  """A flat dict (for CSV and the compare table) of one layout."""
  row = {"layout": label, "mesh": str(report.mesh_shape).replace(",", ";"),
         "rules": str(report.layout_rules),
         "step_time_s": report.step_time_s,
         "compute_time_s": report.compute_time_s,
         "comm_time_s": report.comm_time_s,
         "interference_time_s": report.interference_time_s}
  for a, t in report.comm_time_by_axis.items():
    row[f"comm_{a}_s"] = t
  for c in _categories(report):
    row[f"{c}_bytes"] = int(report.memory_by_category.get(c, 0))
  row["peak_memory_bytes"] = int(report.peak_memory_bytes)
  row["hbm_bytes"] = int(report.hbm_bytes)
  row["usable_memory_bytes"] = int(report.usable_memory_bytes)
  row["fits"] = bool(report.fits_in_memory)
  if result is not None:
    row.update(status=result.status, gap=result.gap,
               solve_time_s=result.solve_time_s)
  return row


def frame_records(df, index_name=None):
  """``DataFrame`` -> list of dicts with NaN as None (JSON-safe)."""
  if index_name is not None:
    df = df.reset_index().rename(columns={"index": index_name})
  out = []
  for rec in df.to_dict(orient="records"):
    out.append({k: _py(v) for k, v in rec.items()})
  return out


def _py(v):
  if v is pd.NA or v is None:
    return None
  if hasattr(v, "item"):
    v = v.item()
  if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
    return None
  return v


# --- rich rendering ----------------------------------------------------------
def render(console, df, title=None, formats=None, best=None, index=True,
           justify=None, caption=None, *, show_header=True, abbrev=None):
  """Prints ``df`` as a rich table whose cells never break a word.

  Args:
    console: a rich Console.
    df: the DataFrame.
    title: table title.
    formats: ``{column: fn(value) -> str}``; other cells use ``str``.
    best: ``{column: "min" | "max"}``: the best cell of each is marked with
      ``*`` and shown in bold green.
    index: whether to show the index as the first column.
    justify: ``{column: "left" | "right"}`` (default: numbers right).
    caption: a line under the table.
    show_header: whether to show the column names.
    abbrev: ``{column: short header}`` used when the table is too wide for
      the console with the full names (a legend under the table says what
      each stands for).  If it is still too wide, the last columns are left
      out and the caption names them (``--format csv`` has every column).
  """
  formats, best, justify = formats or {}, best or {}, justify or {}
  frame = df.reset_index() if index else df
  cells = _cells(frame, formats, best)
  columns = [str(c) for c in frame.columns]
  headers = dict(zip(columns, columns))
  notes = []
  table = _table(frame, cells, columns, headers, title, caption, justify,
                 formats, show_header)
  if _too_wide(console, table) and abbrev:
    short = {c: abbrev[c] for c in columns if c in abbrev}
    headers.update(short)
    notes.append("; ".join(f"{s} = {c}" for c, s in short.items()))
  dropped = []
  while _too_wide(console, _table(frame, cells, columns, headers, title,
                                  None, justify, formats, show_header)) \
      and len(columns) > 2:
    dropped.insert(0, columns.pop())
  if dropped:
    notes.append(f"not shown at {console.width} columns: "
                 f"{', '.join(dropped)} (--format csv has them)")
  text = "\n".join([caption] * bool(caption) + notes) or None
  console.print(_table(frame, cells, columns, headers, title, text, justify,
                       formats, show_header))
  console.print()


def _cells(frame, formats, best):
  """``{column: [rich Text per row]}``, the best cells marked."""
  from rich.text import Text
  marks = {}
  for col, how in best.items():
    vals = pd.to_numeric(frame[col], errors="coerce")
    if vals.notna().sum() > 1:
      target = vals.min() if how == "min" else vals.max()
      marks[col] = set(frame.index[vals == target])
  out = {}
  for col in frame.columns:
    texts = []
    for i, v in frame[col].items():
      s = formats[col](v) if col in formats else (
          "-" if v is None or (isinstance(v, float) and math.isnan(v))
          else str(v))
      texts.append(Text(s + "*", style="bold green") if i in marks.get(
          col, ()) else Text(s))
    out[str(col)] = texts
  return out


def _table(frame, cells, columns, headers, title, caption, justify, formats,
           show_header):
  from rich import box
  from rich.table import Table
  table = Table(title=title, box=box.SIMPLE_HEAD, caption=caption,
                title_justify="left", caption_justify="left", pad_edge=False,
                show_edge=False, show_header=show_header,
                title_style="bold", caption_style="dim")
  for col in columns:
    numeric = pd.api.types.is_numeric_dtype(frame[col]) and \
        frame[col].dtype != bool
    right = numeric or col in formats
    # A text column is at least its longest word wide: rich would
    # otherwise fold a word when it shares out the console's width.
    longest = max((len(w) for t in cells[col] for w in t.plain.split()),
                  default=1)
    table.add_column(headers[col], justify=justify.get(
        col, "right" if right else "left"), overflow="fold",
        no_wrap=right, min_width=None if right else longest)
  for i in range(len(frame)):
    table.add_row(*(cells[c][i] for c in columns))
  return table


def _too_wide(console, table):
  """Whether ``table`` needs more than the console's width to show every
  word whole: rich's own measure of its smallest width, or the sum of
  each column's least width (a text column's ``min_width``, the widest
  cell of a column that does not wrap) and the padding between them."""
  if table.__rich_measure__(console, console.options).minimum > \
      console.width:
    return True
  need = 0
  for column in table.columns:
    cells = [column.header, *column.cells]
    if column.no_wrap:
      width = max(console.measure(c).maximum for c in cells)
    else:
      width = max(column.min_width or 1, max(
          console.measure(c).minimum for c in cells))
    need += width
  # A space of padding on each side and the blank divider between them.
  return need + 3 * (len(table.columns) - 1) > console.width


def write_csv(df, stream, index=True):
  df.to_csv(stream, index=index)
