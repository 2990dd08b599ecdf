"""``--html FILE`` of ``solve``, ``report``, ``compare`` and ``mesh``: the
self-contained HTML report (:mod:`autolayout.render`) of the layouts the
command answered, drawn from its JSON payload.

Each command gives its :class:`~autolayout.cli.context.Answer` a ``views``
function, ``(payload) -> [LayoutView]``, built here by :func:`one`,
:func:`several` or :func:`ranked`.
"""

import sys

from autolayout.cli.errors import CliInputError


def add_argument(p):
  p.add_argument("--html", metavar="OUT.html",
                 help="also write an interactive HTML report (one "
                 "self-contained file, works offline)")


def one(report, result=None, outputs=None, key="result"):
  """The views of a command answering one layout (``payload[key]``);
  ``outputs``: the step's outputs as the report was priced with (default:
  the solver result's)."""
  def views(payload):
    from autolayout.render.views import layout_view
    outs = outputs or getattr(result, "outputs", None) or None
    return [layout_view("plan", payload[key], report, chosen=True,
                        outputs=outs)]
  return views


def several(reports, outputs=None, budget=None):
  """The views of ``compare``: every layout; the fastest that fits (in the
  usable HBM and within ``budget`` bytes, if given) is the chosen one."""
  def views(payload):
    from autolayout.render.views import layout_view
    recs = payload["layouts"]
    fits = [r for r in recs if r["memory"]["fits"] and (
        budget is None or r["memory"]["peak_bytes"] <= budget)] or recs
    best = min(fits, key=lambda r: r["step_time_s"])["label"]
    return [layout_view(r["label"], r, reports[r["label"]],
                        chosen=r["label"] == best, outputs=outputs,
                        counterfactuals=r["label"] == best)
            for r in recs]
  return views


def ranked(results, outputs=None):
  """The views of ``mesh``: each solved mesh shape, rank 1 chosen."""
  def views(payload):
    from autolayout.render.views import layout_view
    by_mesh = {r.report.mesh_shape: r for r in results}
    by_text = {str(m).replace(",", ";"): r for m, r in by_mesh.items()}
    out = []
    for rec in payload["ranking"]:
      if rec.get("result") is None:
        continue
      r = by_text.get(rec["result"]["mesh"])
      first = not out
      out.append(layout_view(rec["mesh"], rec["result"],
                             r.report if r else None, chosen=first,
                             outputs=outputs, counterfactuals=first))
    return out
  return views


def write(path, command, payload, views):
  """Writes the page, or raises CliInputError naming the path."""
  from autolayout.render import page as render_page
  page = render_page.build(command, payload, views(payload))
  try:
    with open(path, "w", encoding="utf-8") as f:
      f.write(page)
  except OSError as e:
    raise CliInputError(f"cannot write the HTML report to {path!r}: {e}",
                        hint="give --html a writable path ending in .html")
  print(f"wrote {path}", file=sys.stderr)
