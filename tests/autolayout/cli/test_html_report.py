"""The ``--html`` report, rendered in a real headless Chromium.

Each command's page is written by ``main([... '--format', 'json',
'--html', PATH])``, so the same run gives the JSON and the page.  Chromium
(Debian's ``chromium``, itself the driver: one headless run gives the DOM
after the scripts ran (``--dump-dom``), the picture (``--screenshot``) and
``--enable-logging=stderr`` every console message) then loads the file
offline, and the test checks:

* no console message and nothing in the page's own error box;
* every figure was drawn by plotly.js (its ``js-plotly-plot`` class and an
  SVG), and the page fetched nothing (plotly.js is inline);
* the numbers of the layouts table equal the JSON output, value by value;
* the screenshot is not blank.

Without Chromium the test skips, saying so; under CI (``CI=true``) a
missing browser fails instead.
"""

import html.parser
import json
import os
import shutil
import subprocess

import pytest

from autolayout import cli

TINY = ["--model", "transformer_tiny", "--topology", "dgx-h100"]
MESH = ["--mesh", "data:2;model:4"]
PAGES = {
    "solve": ["solve", *TINY, *MESH],
    "report": ["report", *TINY, *MESH, "-l", "batch:data;d_ff:model"],
    "compare": ["compare", *TINY, *MESH, "-l", "dp=batch:data",
                "-l", "mp=d_ff:model;heads:model", "-l", "auto"],
    "mesh": ["mesh", *TINY],
    # A plan file's layout: {plan} is the file `solve --save` wrote.
    "report-plan": ["report", *TINY, "-l", "@{plan}"],
}


def _chromium():
  for name in ("chromium", "chromium-browser", "google-chrome"):
    path = shutil.which(name)
    if path:
      return path
  why = ("no Chromium on PATH (Debian: apt-get install chromium); the HTML "
         "report's browser test needs a real browser")
  if os.environ.get("CI", "").lower() == "true":
    pytest.fail("CI=true but " + why)
  pytest.skip(why)


def _browse(page, *flags):
  """Runs headless Chromium on ``page``; returns (stdout, console lines)."""
  p = subprocess.run(
      [_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
       "--hide-scrollbars", "--enable-logging=stderr", "--v=0",
       "--virtual-time-budget=3000", "--window-size=1280,3000", *flags,
       f"file://{page}"], capture_output=True, text=True, timeout=120)
  console = [l for l in p.stderr.splitlines() if ":CONSOLE" in l]
  return p.stdout, console


class _Cells(html.parser.HTMLParser):
  """The ``data-key``/``data-value`` cells of each ``data-layout`` row, the
  ids of drawn plotly figures, the error box's text and any URL fetched."""

  def __init__(self):
    super().__init__()
    self.rows, self.drawn, self.errors, self.remote = {}, set(), "", []
    self._row = None
    self._in_errors = False

  def handle_starttag(self, tag, attrs):
    a = dict(attrs)
    if "data-layout" in a:
      self._row = self.rows.setdefault(a["data-layout"], {})
    if "data-key" in a and self._row is not None:
      self._row[a["data-key"]] = a["data-value"]
    if "js-plotly-plot" in (a.get("class") or "") and a.get("id"):
      self.drawn.add(a["id"])
    if a.get("id") == "page-errors":
      self._in_errors = True
    src = a.get("src") or ""
    if src.startswith(("http:", "https:", "//")):
      self.remote.append(src)

  def handle_endtag(self, tag):
    if tag == "tr":
      self._row = None
    if tag == "pre":
      self._in_errors = False

  def handle_data(self, data):
    if self._in_errors:
      self.errors += data


def _records(command, payload):
  command = command.split("-")[0]
  if command == "compare":
    return {r["label"]: r for r in payload["layouts"]}
  if command == "mesh":
    return {r["mesh"]: r["result"] for r in payload["ranking"]
            if r["result"]}
  return {"plan": payload["result"]}


@pytest.mark.parametrize("command", sorted(PAGES))
def test_page_loads_clean_and_shows_the_json_numbers(command, tmp_path,
                                                     capsys):
  _chromium()   # skip (or fail under CI) before any work
  page = tmp_path / f"{command}.html"
  plan = tmp_path / "plan.json"
  if "{plan}" in " ".join(PAGES[command]):
    assert cli.main(["solve", *TINY, *MESH, "--memory-budget", "120KiB",
                     "--save", str(plan)]) == 0
    capsys.readouterr()
  args = [a.format(plan=plan) for a in PAGES[command]]
  assert cli.main([*args, "--format", "json", "--html", str(page)]) == 0
  payload = json.loads(capsys.readouterr().out)
  shot = tmp_path / f"{command}.png"
  dom, console = _browse(page, "--dump-dom", f"--screenshot={shot}")
  assert console == [], console
  cells = _Cells()
  cells.feed(dom)
  assert cells.errors.strip() == "", cells.errors
  assert cells.remote == []
  want = {"fig-time", "fig-mesh", "fig-memory"}
  if command in ("compare", "mesh"):
    want.add("fig-comparison")
  if command == "report-plan":   # the plan's rules, each with its price
    assert 'data-key="otherwise_step_time_s"' in dom
    assert "d_ff:model" in dom
  assert want <= cells.drawn, cells.drawn
  # Every figure and the title name the model, its size, topology, mesh.
  assert dom.count("5.41K params") >= len(want) + 1
  assert "dgx-h100" in dom
  records = _records(command, payload)
  assert set(cells.rows) == set(records)
  for label, rec in records.items():
    row = cells.rows[label]
    for key in ("step_time_s", "compute_time_s", "comm_time_s",
                "hidden_comm_time_s", "interference_time_s"):
      assert float(row[key]) == rec[key], (label, key)
    assert int(row["peak_bytes"]) == rec["memory"]["peak_bytes"]
  # The chosen layout's decomposition sums to its step time.
  chosen = next(iter(records.values())) if command != "compare" else min(
      records.values(), key=lambda r: r["step_time_s"])
  terms = chosen["compute_time_s"] + chosen["interference_time_s"] + sum(
      chosen["comm_time_by_axis_s"].values())
  assert terms == pytest.approx(chosen["step_time_s"], rel=1e-9)
  _assert_not_blank(shot)


def _assert_not_blank(path):
  from PIL import Image
  img = Image.open(path).convert("RGB")
  colors = img.getcolors(maxcolors=1 << 20) or []
  inked = sum(n for n, c in colors if c != (255, 255, 255))
  assert len(colors) > 50, "the screenshot has almost no colours"
  assert inked > 0.02 * img.width * img.height, "the screenshot is blank"
