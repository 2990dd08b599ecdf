"""Plots of layout costs, used by the ``mtf-layout`` CLI and the notebooks.

* :func:`memory_bars`: per-device memory (params / optimizer / activations)
  as stacked bars per candidate layout, with the chip's HBM as a line;
* :func:`time_breakdown`: step time split into compute and communication
  per mesh axis, per candidate;
* :func:`pareto_front`: peak memory versus step time of a Pareto front;
* :func:`mesh_ranking`: predicted step time of every mesh shape.

Each takes an optional matplotlib ``Axes`` (so notebooks can lay out their
own figures) and returns the Axes it drew on.  Without one it makes a new
:class:`matplotlib.figure.Figure` (no pyplot, so no global state and no
display needed; save it with :func:`save`).

Example:
  >>> import costmodels, mesh_tf as mtf
  >>> g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
  >>> x = mtf.zeros(mesh, "batch:64,d_model:1024")
  >>> w = mtf.get_variable(mesh, "w", "d_model:1024,d_ff:4096")
  >>> y = mtf.einsum([x, w], reduced_dims=[w.shape[0]])
  >>> r = costmodels.evaluate(g, "data:2;model:4", "batch:data", "dgx-h100")
  >>> ax = memory_bars({"dp": r})
  >>> [t.get_text() for t in ax.get_xticklabels()]
  ['dp']
"""

import numpy as np
from matplotlib.figure import Figure

GIB = 2**30
CATEGORIES = ("params", "gradients", "optimizer", "activations", "kv_cache")
_CATEGORY_COLORS = {"params": "#4C72B0", "gradients": "#8172B3",
                    "optimizer": "#DD8452",
                    "activations": "#55A868", "kv_cache": "#DA8BC3"}
_COMPUTE_COLOR = "#8C8C8C"
_AXIS_COLORS = ("#C44E52", "#8172B3", "#937860", "#DA8BC3", "#CCB974",
                "#64B5CD")


def _items(reports):
  if hasattr(reports, "items"):
    return list(reports.items())
  return [(str(r.layout_rules) or "replicated", r) for r in reports]


def _pad_few(ax, n):
  # One or two bars would otherwise fill the whole width.
  if n < 3:
    ax.set_xlim(-1.0, n)


def _new_axes(width=6.4, height=4.0):
  fig = Figure(figsize=(width, height), layout="constrained")
  return fig.add_subplot()


def memory_bars(reports, ax=None):
  """Stacked per-device memory at the peak, one bar per candidate layout.

  Args:
    reports: ``{label: CostReport}`` (or a list of CostReports).
    ax: a matplotlib Axes to draw on (default: a new Figure's).

  Returns:
    The Axes.  Each candidate's chip HBM is drawn as a dashed line over its
    bar (one line across all bars when they share a chip); when every bar
    is under a tenth of it, the title states it instead, so that the bars
    stay readable.
  """
  items = _items(reports)
  ax = ax if ax is not None else _new_axes()
  x = np.arange(len(items))
  bottom = np.zeros(len(items))
  for cat in CATEGORIES:
    if not any(cat in r.memory_by_category for _, r in items):
      continue  # e.g. kv_cache, which only decoding graphs have
    vals = np.array([r.memory_by_category.get(cat, 0) / GIB
                     for _, r in items])
    ax.bar(x, vals, 0.6, bottom=bottom, label=cat,
           color=_CATEGORY_COLORS[cat])
    bottom += vals
  # The peak can exceed the sum of categories only by rounding; mark it.
  peaks = np.array([r.peak_memory_bytes / GIB for _, r in items])
  ax.scatter(x, peaks, marker="_", s=400, color="black", zorder=3,
             label="peak")
  hbms = [r.hbm_bytes / GIB for _, r in items]
  title = "Per-device memory at the peak"
  if hbms and max(peaks.max(), bottom.max()) < 0.1 * min(hbms):
    # A far-away HBM line would flatten every bar; say it in the title.
    title += f"\n(HBM {min(hbms):.3g} GiB per device, off the chart)"
  elif len(set(hbms)) == 1 and hbms:
    ax.axhline(hbms[0], color="red", linestyle="--",
               label=f"HBM {hbms[0]:.3g} GiB")
  else:
    for xi, h in zip(x, hbms):
      ax.hlines(h, xi - 0.4, xi + 0.4, colors="red", linestyles="--")
    ax.plot([], [], color="red", linestyle="--", label="HBM")
  ax.set_xticks(x, [label for label, _ in items],
                rotation=20 if len(items) > 3 else 0, ha="right"
                if len(items) > 3 else "center")
  _pad_few(ax, len(items))
  ax.set_ylabel("GiB per device")
  ax.set_title(title)
  ax.legend(fontsize="small")
  return ax


def time_breakdown(reports, ax=None):
  """Step time per candidate, stacked: compute, then comm on each mesh axis.

  Args:
    reports: ``{label: CostReport}`` (or a list of CostReports).
    ax: a matplotlib Axes (default: a new Figure's).

  Returns:
    The Axes.
  """
  items = _items(reports)
  ax = ax if ax is not None else _new_axes()
  axes = []
  for _, r in items:
    for a in r.comm_time_by_axis:
      if a not in axes:
        axes.append(a)
  x = np.arange(len(items))
  bottom = np.array([r.compute_time_s * 1e3 for _, r in items])
  ax.bar(x, bottom, 0.6, label="compute", color=_COMPUTE_COLOR)
  for i, a in enumerate(axes):
    vals = np.array([r.comm_time_by_axis.get(a, 0.0) * 1e3
                     for _, r in items])
    links = {r.mapping[a].link_kind for _, r in items
             if a in r.comm_time_by_axis}
    ax.bar(x, vals, 0.6, bottom=bottom, label=f"comm {a} "
           f"({'/'.join(sorted(links))})",
           color=_AXIS_COLORS[i % len(_AXIS_COLORS)])
    bottom = bottom + vals
  for xi, total in zip(x, bottom):
    ax.annotate(f"{total:.3g}", (xi, total), ha="center", va="bottom",
                fontsize="small")
  ax.set_xticks(x, [label for label, _ in items],
                rotation=20 if len(items) > 3 else 0, ha="right"
                if len(items) > 3 else "center")
  _pad_few(ax, len(items))
  ax.set_ylabel("ms per step")
  ax.set_title("Step time: compute + comm per mesh axis")
  if len(bottom) and bottom.max() > 0:
    ax.set_ylim(0, bottom.max() * 1.15)
  ax.legend(fontsize="small")
  return ax


def _points(front):
  """``[(peak bytes, step s, rules)]`` from LayoutResults or a DataFrame."""
  if hasattr(front, "iterrows"):
    return [(row["peak_memory_bytes"], row["step_time_s"], row["rules"])
            for _, row in front.iterrows()]
  return [(r.peak_memory_bytes, r.step_time_s, str(r.rules)) for r in front]


def pareto_front(front, ax=None, hbm_bytes=None, annotate=True):
  """The memory-versus-step-time front.

  Args:
    front: LayoutResults (as :func:`autolayout.pareto` returns) or its table
      (columns ``peak_memory_bytes``, ``step_time_s``, ``rules``).
    ax: a matplotlib Axes (default: a new Figure's).
    hbm_bytes: draw the chip's HBM as a vertical line.
    annotate: label each point with its rules.

  Returns:
    The Axes.
  """
  pts = sorted(_points(front))
  ax = ax if ax is not None else _new_axes()
  mem = [p[0] / GIB for p in pts]
  ms = [p[1] * 1e3 for p in pts]
  ax.step(mem, ms, where="post", color="#4C72B0", alpha=0.5)
  ax.plot(mem, ms, "o", color="#4C72B0", label="Pareto-optimal layouts")
  if annotate:
    for m, t, (_, _, rules) in zip(mem, ms, pts):
      ax.annotate(rules or "(replicated)", (m, t), textcoords="offset points",
                  xytext=(6, 4), fontsize="x-small")
  title = "Memory vs. step time: the Pareto front"
  if hbm_bytes and mem and max(mem) >= 0.3 * hbm_bytes / GIB:
    ax.axvline(hbm_bytes / GIB, color="red", linestyle="--",
               label=f"HBM {hbm_bytes / GIB:.3g} GiB")
  elif hbm_bytes:
    # A far-away HBM line would squash the front into one column.
    title += f"\n(HBM {hbm_bytes / GIB:.3g} GiB per device, off the chart)"
  ax.set_xlabel("peak memory per device (GiB)")
  ax.set_ylabel("step time (ms)")
  ax.set_title(title)
  ax.legend(fontsize="small")
  ax.margins(x=0.15, y=0.12)
  return ax


def mesh_ranking(table, ax=None, top=None):
  """Predicted step time of each mesh shape (best at the top).

  Args:
    table: the DataFrame :func:`autolayout.auto_mesh_and_layout` returns
      (columns ``mesh``, ``status``, ``step_time_s``).
    ax: a matplotlib Axes (default: a new Figure's).
    top: show only the best ``top`` meshes that have a layout.

  Returns:
    The Axes.  Meshes that do not embed or have no layout within the budget
    are listed under the bars, without one.
  """
  ok = table[table["step_time_s"].notna()].sort_values("step_time_s")
  if top is not None:
    ok = ok.head(top)
  rest = table[table["step_time_s"].isna()]
  ax = ax if ax is not None else _new_axes(6.4, max(2.5, 0.35 * len(ok)
                                                    + 1.5))
  y = np.arange(len(ok))[::-1]
  ms = ok["step_time_s"].to_numpy(dtype=float) * 1e3
  colors = ["#55A868" if i == 0 else "#4C72B0" for i in range(len(ok))]
  ax.barh(y, ms, color=colors)
  ax.set_yticks(y, [m.replace(";", " x ") for m in ok["mesh"]])
  for yi, v in zip(y, ms):
    ax.annotate(f"{v:.3g} ms", (v, yi), xytext=(3, 0),
                textcoords="offset points", va="center", fontsize="small")
  ax.set_xlabel("predicted step time (ms)")
  ax.set_title("Mesh shapes ranked (each with its optimal layout)")
  ax.margins(x=0.2)
  if len(rest):
    counts = rest["status"].value_counts()
    ax.text(0, -0.12 if len(ok) > 3 else -0.25,
            "not shown: " + ", ".join(f"{n} {s}" for s, n in counts.items()),
            transform=ax.transAxes, fontsize="small", va="top")
  return ax


def compare_figure(reports, title=None):
  """A Figure with :func:`memory_bars` and :func:`time_breakdown` side by
  side for ``{label: CostReport}``."""
  n = len(_items(reports))
  fig = Figure(figsize=(max(10.0, 2.2 * n + 4), 4.5), layout="constrained")
  ax1, ax2 = fig.subplots(1, 2)
  memory_bars(reports, ax1)
  time_breakdown(reports, ax2)
  if title:
    fig.suptitle(title)
  return fig


def save(fig_or_ax, path, dpi=120):
  """Writes a Figure (or an Axes' figure) to ``path`` (PNG, SVG, PDF...)."""
  fig = fig_or_ax if isinstance(fig_or_ax, Figure) else fig_or_ax.figure
  fig.savefig(path, dpi=dpi)
  return path

