"""The Plotly figures of the HTML report, one function per figure.

Each takes :class:`~autolayout.render.views.LayoutView` values (numbers
from the JSON records) and a ``subject`` line naming the model, its size,
the topology and the mesh, which every figure's title carries.
"""

import plotly.graph_objects as go

from autolayout.render import text
from autolayout.render.views import time_terms

COLORS = {"params": "#4c72b0", "gradients": "#dd8452", "optimizer": "#55a868",
          "activations": "#c44e52", "kv_cache": "#8172b3"}
FONT = dict(family="DejaVu Sans, Arial, sans-serif", size=13)


def _layout(fig, title, subject, height=420):
  fig.update_layout(
      title=dict(text=f"{title}<br><sup>{subject}</sup>", x=0.01),
      height=height, margin=dict(l=70, r=30, t=80, b=60), font=FONT,
      hoverlabel=dict(namelength=-1), template="plotly_white",
      legend=dict(orientation="h", y=-0.18))
  return fig


def _toggle(fig, labels, per_label):
  """A dropdown showing one layout's traces at a time (``per_label``: the
  number of traces each label owns, in order)."""
  if len(labels) < 2:
    return
  buttons, start = [], 0
  total = sum(per_label)
  for label, n in zip(labels, per_label):
    vis = [start <= i < start + n for i in range(total)]
    buttons.append(dict(label=label, method="update", args=[{"visible": vis}]))
    start += n
  fig.update_layout(updatemenus=[dict(buttons=buttons, x=1.0, y=1.18,
                                      xanchor="right", direction="down")])


def mesh_figure(view, subject):
  """Each mesh axis as a bar of its size (log scale), labelled with its
  link; hover lists the tensor dims and storage dims it carries."""
  rec = view.record
  carried = text.carried_dims(rec)
  names = [a["axis"] for a in rec["axes"]]
  hover = []
  for a in rec["axes"]:
    dims, storage = carried[a["axis"]]
    hover.append(
        f"<b>{a['axis']}</b> size {a['size']}<br>link {a['link']} "
        f"({a['structure']}), {text.rate(a['bandwidth_bytes_per_s'])}<br>"
        f"dims: {', '.join(dims) or 'none'}<br>"
        f"storage dims: {', '.join(storage) or 'none'}")
  fig = go.Figure(go.Bar(
      y=names, x=[a["size"] for a in rec["axes"]], orientation="h",
      text=[f"{a['size']} x {a['link']}" for a in rec["axes"]],
      textposition="auto", hovertext=hover, hoverinfo="text",
      marker_color="#4c72b0", name="mesh axes"))
  sizes = [a["size"] for a in rec["axes"]]
  fig.update_xaxes(title="devices along the axis", rangemode="tozero",
                   type="log" if max(sizes) > 16 * min(sizes) else "linear")
  fig.update_yaxes(autorange="reversed")
  return _layout(fig, f"Mesh {rec['mesh']}: axes, links and the dims they "
                 "carry", subject, height=160 + 60 * len(names))


def memory_figure(views, subject):
  """Per-device memory over the step's schedule, stacked by category, the
  peak marked, with the usable HBM (less the reserve), HBM and the memory
  budget as lines.  A dropdown switches between layouts."""
  fig = go.Figure()
  labels, counts, top, off = [], [], 0, []
  for i, v in enumerate(views):
    if v.memory is None:
      continue
    m, mem = v.memory, v.record["memory"]
    n = 0
    for cat, values in m.by_category:
      fig.add_trace(go.Scatter(
          x=m.steps, y=values, name=cat, stackgroup=f"s{i}", mode="lines",
          line=dict(width=0.5, color=COLORS.get(cat)), visible=not labels,
          legendgroup=cat,
          hovertemplate=f"{cat}: %{{y:,}} B<br>step %{{x}}<extra>"
                        f"{v.label}</extra>"))
      n += 1
    fig.add_trace(go.Scatter(
        x=[m.peak_step], y=[m.peak_bytes], mode="markers+text",
        marker=dict(size=11, color="black", symbol="x"),
        text=[f"peak {text.nbytes(m.peak_bytes)}"], textposition="top center",
        name="peak", visible=not labels,
        hovertemplate=(f"peak {m.peak_bytes:,} B at step {m.peak_step}"
                       f" ({m.peak_op})<extra>{v.label}</extra>")))
    n += 1
    top = max(top, m.peak_bytes)
    labels.append(v.label)
    counts.append(n)
    if len(labels) == 1:   # the lines of the first (chosen) layout
      off = _memory_lines(fig, mem, v.record.get("solver"), top)
  _toggle(fig, labels, counts)
  fig.update_xaxes(title="memory step (the schedule's order of ops)"
                   + ("; off scale: " + ", ".join(off) if off else ""))
  fig.update_yaxes(title="bytes per device")
  return _layout(fig, "Memory per device over the step", subject, 460)


def _memory_lines(fig, mem, solver, peak):
  """Draws HBM, usable HBM and the budget; returns the names of those far
  above the peak, which are not drawn, so the curve stays readable."""
  lines = [("HBM", mem["hbm_bytes"], "#444"),
           (f"usable ({mem['memory_reserve_fraction']:.0%} reserve)",
            mem["usable_bytes"], "#c44e52")]
  budget = (solver or {}).get("memory_budget_bytes")
  if budget:
    lines.append(("budget", budget, "#8172b3"))
  off = []
  for name, y, color in lines:
    if y <= 3 * max(peak, 1):
      fig.add_hline(y=y, line=dict(color=color, dash="dash"),
                    annotation_text=f"{name} {text.nbytes(y)}",
                    annotation_position="top left")
    else:
      off.append(f"{name} {text.nbytes(y)}")
  return off


def time_figure(views, subject):
  """Each layout's step as stacked bars of the JSON decomposition: compute,
  exposed communication per axis, interference and bubble (they sum to the
  step), and hidden communication as a separate bar."""
  fig = go.Figure()
  names = []
  for v in views:
    for t in time_terms(v.record):
      if t.name not in names:
        names.append(t.name)
  labels = [text.marked(v) for v in views]
  for name in names:
    xs, ys, hover = [], [], []
    for v, label in zip(views, labels):
      terms = {t.name: t for t in time_terms(v.record)}
      t = terms.get(name)
      if t is None:
        continue
      xs.append(label if t.in_step else f"{label} (hidden)")
      ys.append(t.seconds)
      hover.append(f"{name}: {t.seconds!r} s ({text.seconds(t.seconds)})"
                   f"<br>step {text.seconds(v.record['step_time_s'])}")
    fig.add_trace(go.Bar(x=xs, y=ys, name=name, hovertext=hover,
                         hoverinfo="text"))
  fig.update_layout(barmode="stack")
  fig.update_yaxes(title="seconds per step")
  return _layout(fig, "Step time: compute + exposed comm per axis + "
                 "interference (+ bubble); hidden comm beside it",
                 subject, 440)


def comparison_figure(views, subject):
  """Every layout side by side in a table, with buttons that sort it by a
  column (the chosen layout marked with a star)."""
  cols = text.COMPARISON
  rows = [text.comparison_row(v) for v in views]
  header = [c.title for c in cols]

  def cells(key):
    order = sorted(range(len(rows)), key=lambda i: (rows[i][key] is None,
                                                    rows[i][key]))
    return [[text.cell(c, rows[i][c.key]) for i in order] for c in cols]

  fig = go.Figure(go.Table(
      header=dict(values=header, fill_color="#dde4ee", align="left"),
      cells=dict(values=cells("step_time_s"), align="left", height=24)))
  sortable = [c for c in cols if c.sortable]
  fig.update_layout(updatemenus=[dict(
      type="buttons", direction="right", x=0, y=1.0, xanchor="left",
      yanchor="bottom",
      buttons=[dict(label=f"sort by {c.title}", method="restyle",
                    args=[{"cells.values": [cells(c.key)]}])
               for c in sortable])])
  _layout(fig, "Layouts side by side (* chosen); the buttons sort it",
          subject, 260 + 48 * len(rows))
  fig.update_layout(margin=dict(t=130))
  return fig
