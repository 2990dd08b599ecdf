"""The HTML report: one self-contained page (plotly.js inline, no network
fetch) of the layouts a command answered.

Every number in a table cell carries the exact JSON value it shows, as
``data-key`` and ``data-value`` attributes, so a test (or a script) can
read the page and compare it with ``--format json``.
"""

import html

from autolayout.render import figures, text
from autolayout.render.views import time_terms

# Errors on the page (a figure that fails to draw) are written into the
# page itself, where a reader and the browser test both see them.
_ERRORS = """<pre id="page-errors" style="color:#b00"></pre>
<script>
window.addEventListener("error", function (e) {
  document.getElementById("page-errors").textContent += e.message + "\\n";
});
</script>"""

_STYLE = """<style>
body { font-family: DejaVu Sans, Arial, sans-serif; margin: 24px;
       color: #222; max-width: 1200px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; }
table.data { border-collapse: collapse; margin: 8px 0; font-size: 14px; }
table.data td, table.data th { border-bottom: 1px solid #ddd;
  padding: 3px 10px; text-align: left; vertical-align: top; }
table.data td.num { text-align: right; font-variant-numeric: tabular-nums;
                    white-space: nowrap; }
tr.chosen { background: #eef6ee; font-weight: bold; }
.note { color: #555; font-size: 13px; }
</style>"""


def _esc(s):
  return html.escape(str(s), quote=True)


def _num(key, value, shown):
  """A table cell showing ``shown`` that carries the JSON value."""
  return (f'<td class="num" data-key="{_esc(key)}" '
          f'data-value="{_esc(repr(value))}">{_esc(shown)}</td>')


def _table(head, rows, cls="data", row_attrs=None):
  out = [f'<table class="{cls}"><tr>'
         + "".join(f"<th>{_esc(h)}</th>" for h in head) + "</tr>"]
  for i, cells in enumerate(rows):
    attrs = row_attrs[i] if row_attrs else ""
    out.append(f"<tr{attrs}>" + "".join(cells) + "</tr>")
  out.append("</table>")
  return "\n".join(out)


def _td(s):
  return f"<td>{_esc(s)}</td>"


def _summary(views):
  rows, attrs = [], []
  for v in views:
    rec = v.record
    rows.append([
        _td(text.marked(v)), _td(rec["mesh"]),
        _td((rec["rules"] or "(replicated)").replace(";", "; ")),
        _num("step_time_s", rec["step_time_s"],
             text.seconds(rec["step_time_s"])),
        _num("compute_time_s", rec["compute_time_s"],
             text.seconds(rec["compute_time_s"])),
        _num("comm_time_s", rec["comm_time_s"],
             text.seconds(rec["comm_time_s"])),
        _num("hidden_comm_time_s", rec["hidden_comm_time_s"],
             text.seconds(rec["hidden_comm_time_s"])),
        _num("interference_time_s", rec["interference_time_s"],
             text.seconds(rec["interference_time_s"])),
        _num("peak_bytes", rec["memory"]["peak_bytes"],
             text.nbytes(rec["memory"]["peak_bytes"])),
        _td("yes" if rec["memory"]["fits"] else "NO")])
    attrs.append(f' class="layout{" chosen" if v.chosen else ""}" '
                 f'data-layout="{_esc(v.label)}"')
  return _table(["layout", "mesh", "rules", "step", "compute",
                 "exposed comm", "hidden comm", "interference",
                 "peak memory", "fits"], rows, row_attrs=attrs)


def _decomposition(view):
  terms = time_terms(view.record)
  rows = [[_td(t.name), _num(t.name, t.seconds, text.seconds(t.seconds)),
           _td("yes" if t.in_step else "no (under compute)")] for t in terms]
  step = view.record["step_time_s"]
  rows.append([_td("step"), _num("step_time_s", step, text.seconds(step)),
               _td("the sum of the terms in the step")])
  names = " + ".join(t.name for t in terms if t.in_step)
  return (f'<p>step = {_esc(names)} = {_esc(text.seconds(step))}</p>'
          + _table(["term", "seconds", "in the step"], rows,
                   cls="data decomposition"))


def _axes(view):
  carried = text.carried_dims(view.record)
  rows = []
  for a in view.record["axes"]:
    dims, storage = carried[a["axis"]]
    rows.append([_td(a["axis"]), _num("size", a["size"], a["size"]),
                 _td(a["link"]), _td(a["structure"]),
                 _td(text.rate(a["bandwidth_bytes_per_s"])),
                 _td(", ".join(dims) or "-"), _td(", ".join(storage) or "-")])
  return _table(["mesh axis", "size", "link", "structure", "bandwidth",
                 "tensor dims", "storage dims"], rows, cls="data axes")


def _memory(view):
  mem = view.record["memory"]
  most = dict(view.memory.most) if view.memory is not None else {}
  rows = []
  for c in ("params_bytes", "gradients_bytes", "optimizer_bytes",
            "activations_bytes", "kv_cache_bytes", "peak_bytes",
            "usable_bytes", "hbm_bytes"):
    m = most.get(c[:-6])
    rows.append([_td(c[:-6]), _num(c, mem[c], text.nbytes(mem[c])),
                 _td("-" if m is None else text.nbytes(m))])
  return _table(["category", "at the peak step", "most in the step"], rows,
                cls="data memory")


def _counterfactuals(view):
  if not view.counterfactuals:
    return '<p class="note">No rules: every tensor is replicated.</p>'
  base = view.record
  budget = (base.get("solver") or {}).get("memory_budget_bytes")
  rows = []
  for c in view.counterfactuals:
    note = c.note
    if budget and c.peak_memory_bytes is not None and \
        c.peak_memory_bytes > budget:
      note = (note + "; " if note else "") + "over the memory budget"
    dt = ("-" if c.step_time_s is None else
          text.seconds(c.step_time_s) + " ("
          + _delta(c.step_time_s, base["step_time_s"], text.seconds) + ")")
    dm = ("-" if c.peak_memory_bytes is None else
          text.nbytes(c.peak_memory_bytes) + " ("
          + _delta(c.peak_memory_bytes, base["memory"]["peak_bytes"],
                   text.nbytes) + ")")
    rows.append([_td(c.kind), _td(c.what), _td(c.otherwise),
                 f'<td data-key="otherwise_step_time_s" data-value='
                 f'"{_esc(repr(c.step_time_s))}">{_esc(dt)}</td>',
                 f'<td data-key="otherwise_peak_bytes" data-value='
                 f'"{_esc(repr(c.peak_memory_bytes))}">{_esc(dm)}</td>',
                 _td(note)])
  return _table(["", "chosen", "otherwise", "step otherwise",
                 "peak otherwise", "note"], rows, cls="data counterfactuals")


def _delta(new, base, fmt):
  d = new - base
  return ("+" if d >= 0 else "-") + fmt(abs(d))


def _figure(fig, div_id):
  return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                     config={"displaylogo": False, "responsive": True})


def build(command, payload, views):
  """The page's HTML text.

  Args:
    command: the subcommand (``solve``, ``report``, ``compare``, ``mesh``).
    payload: its JSON payload (``model`` and the command's keys).
    views: the layouts' :class:`~autolayout.render.views.LayoutView`, the
      chosen one marked (the first view is shown when none is).
  """
  from plotly.offline import get_plotlyjs
  model = payload["model"]
  chosen = next((v for v in views if v.chosen), views[0])
  subject = text.subject(model, chosen.record)
  title = f"mtf-layout {command}: {model['description']}"
  parts = [
      "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
      f"<title>{_esc(title)}</title>", _STYLE, "</head><body>", _ERRORS,
      f"<script>{get_plotlyjs()}</script>",
      f'<h1 id="title">{_esc(title)}</h1>',
      f'<p id="subject">{_esc(subject)}</p>',
      f'<p class="note">{len(views)} layout(s); * marks the chosen one. '
      "Hover a figure for exact numbers.</p>",
      "<h2>Layouts</h2>", _summary(views),
      f"<h2>Step time of {_esc(text.marked(chosen))}</h2>",
      _decomposition(chosen),
      _figure(figures.time_figure(views, subject), "fig-time"),
      f"<h2>Mesh of {_esc(text.marked(chosen))}</h2>", _axes(chosen),
      _figure(figures.mesh_figure(chosen, subject), "fig-mesh"),
      f"<h2>Memory of {_esc(text.marked(chosen))}</h2>", _memory(chosen)]
  shown = [chosen] + [v for v in views if v is not chosen]
  if any(v.memory is not None for v in shown):
    parts.append(_figure(figures.memory_figure(shown, subject), "fig-memory"))
  parts += ["<h2>Rules and decisions, and what the step would be "
            "otherwise</h2>", _counterfactuals(chosen)]
  if len(views) > 1:
    parts += ["<h2>Comparison</h2>",
              _figure(figures.comparison_figure(views, subject),
                      "fig-comparison")]
  parts.append("</body></html>")
  return "\n".join(parts)


def write(path, command, payload, views):
  """Writes :func:`build`'s page to ``path``."""
  with open(path, "w", encoding="utf-8") as f:
    f.write(build(command, payload, views))
