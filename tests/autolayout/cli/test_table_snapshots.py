"""Snapshots of the 80-column tables of ``solve``, ``compare``,
``calibrate`` and ``explain``: what a person reads, held line by line.

Besides equality with the committed text (``tests/autolayout/snapshots``;
rerun with ``MTF_UPDATE_SNAPSHOTS=1`` to rewrite them after a deliberate
change, and read the diff), every snapshot obeys the rules of issue 42: no
line over 80 columns, no word broken across lines (every table word is a
word of the full, unwrapped text), and no ``inf``, ``nan`` or ``e-10`` on
screen.  The solver's own timings are masked.
"""

import io
import os
import re

import pandas as pd
import pytest
from rich.console import Console

from autolayout import cli
from autolayout.cli import calibrate as cal_cmd
from autolayout.cli.context import Context

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "snapshots")
TINY = ["--model", "transformer_tiny", "--topology", "dgx-h100", "--mesh",
        "data:2;model:4"]
COMMANDS = {
    "solve": ["solve", *TINY, "--memory-budget", "120KiB"],
    "compare": ["compare", *TINY, "-l", "dp=batch:data", "-l",
                "mp=d_ff:model;heads:model", "-l", "auto"],
    "explain": ["explain", *TINY, "-l", "batch:data;d_ff:model;vocab:model"],
}
# A calibration as one run on a noisy 2-core machine fitted it: an
# einsum pattern with no measurable time (rate inf), an overlap fitted to
# nothing, an all-split check off by 17498135.5%, and long details.
FITS = [
    ("einsum", "chip", "float32, one device alone", 0.0, 9.1e10, "FLOP/s",
     0.042),
    ("einsum bd,de->be", "chip", "float32, all 8 devices (+3.1 us, bytes "
     "at 4.2 GB/s, tile width/in/out 8/64/64)", 3.1e-6, float("inf"),
     "FLOP/s", 0.31),
    ("overlap", "device", "gradient syncs under compute, all 8 devices",
     0.0, 0.1615, "B/s", 0.55),
    ("allreduce", "device", "reduce_broadcast over a:2", 1.2e-5, 2.3e9,
     "B/s", 0.12),
    ("all-split check", "device", "two slicewise kernels per rep, priced by "
     "the compute fits (a check, nothing is fitted)", 0.0, 0.0, "",
     174981.355),
    ("launch", "chip", "per compute record, all 8 devices (one kernel "
     "alone: 4.1 us)", 2.2e-5, 0.0, "", float("nan")),
]


def _masked(text):
  return re.sub(r"^(solve time\s+).*$", r"\1<timing>", text,
                flags=re.MULTILINE).rstrip() + "\n"


def _check(name, text):
  lines = text.splitlines()
  assert max(len(l.rstrip()) for l in lines) <= 80, text
  for bad in ("inf", "nan", "e-10", "e+0"):
    assert not re.search(rf"\b{re.escape(bad)}\b", text.lower()), (bad,
                                                                     text)
  path = os.path.join(HERE, f"{name}.txt")
  if os.environ.get("MTF_UPDATE_SNAPSHOTS"):
    with open(path, "w", encoding="utf-8") as f:
      f.write(text)
  with open(path, encoding="utf-8") as f:
    assert text == f.read(), f"{name}: the table output changed:\n{text}"


def _words_whole(narrow, wide):
  """Every word of the 80-column text is a word of the same output printed
  200 columns wide (where nothing needs wrapping)."""
  words = set(re.findall(r"\S+", wide))
  broken = [w for w in re.findall(r"\S+", narrow) if w not in words]
  assert not broken, broken


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_table_snapshot(name, capsys, monkeypatch):
  texts = {}
  for width in (200, 80):
    monkeypatch.setenv("COLUMNS", str(width))
    assert cli.main(COMMANDS[name]) == 0
    texts[width] = _masked(capsys.readouterr().out)
  _words_whole(texts[80], texts[200])
  _check(name, texts[80])


def _fits_text(width):
  buf = io.StringIO()
  ctx = Context("table", buf)
  ctx.console = Console(file=buf, width=width, highlight=False)
  df = pd.DataFrame(FITS, columns=["what", "link", "detail", "latency_s",
                                   "rate", "unit", "rel_residual"])
  cal_cmd.show_fits(ctx, df, "Calibrated cpu: 8 x host", 21.3, "mycpu.json")
  return buf.getvalue()


def test_calibrate_table_snapshot_says_failed_fits_in_words():
  text = _masked(_fits_text(80))
  _words_whole(text, _fits_text(200))
  assert "failed" in text and "not measurable" in text
  assert "rerun on an idle" in text
  _check("calibrate", text)
