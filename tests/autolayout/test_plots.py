"""Tests of :mod:`autolayout.plots` on small exact graphs."""

import matplotlib
import numpy as np
import pandas as pd
import pytest

import autolayout
import costmodels
import mesh_tf as mtf
from autolayout import plots

matplotlib.use("Agg")

TOPO = "tpu-v5e-2x4"
MESH = "data:2;model:4"
GIB = 2**30


def _graph(batch=64, d_model=1024, d_ff=4096):
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.zeros(mesh, f"batch:{batch},d_model:{d_model}")
  w = mtf.get_variable(mesh, "w", f"d_model:{d_model},d_ff:{d_ff}")
  y = mtf.relu(mtf.einsum([x, w], reduced_dims=[w.shape[0]]))
  return g, [mtf.reduce_sum(y)]


@pytest.fixture(scope="module")
def reports():
  g, outs = _graph()
  return {name: costmodels.evaluate(g, MESH, rules, TOPO, outputs=outs)
          for name, rules in [("dp", "batch:data"),
                              ("mp", "d_ff:model"),
                              ("both", "batch:data;d_ff:model")]}


def _bar_heights(ax):
  """Bar heights grouped by legend label, in bar order."""
  out = {}
  for container in ax.containers:
    out[container.get_label()] = [p.get_height() for p in container]
  return out


def test_memory_bars_stack_the_categories_and_draw_hbm(reports):
  ax = plots.memory_bars(reports)
  assert [t.get_text() for t in ax.get_xticklabels()] == ["dp", "mp", "both"]
  heights = _bar_heights(ax)
  assert set(heights) == {"params", "gradients", "optimizer", "activations"}
  for i, r in enumerate(reports.values()):
    for cat in ("params", "gradients", "optimizer", "activations"):
      assert heights[cat][i] == pytest.approx(
          r.memory_by_category[cat] / GIB)
  # These layouts use far less than a tenth of HBM: no flattening line, the
  # title says where HBM is instead.
  assert "off the chart" in ax.get_title()


def test_memory_bars_draw_the_hbm_line_when_it_matters():
  g, outs = _graph(batch=8192, d_model=8192, d_ff=32768)
  big = {"replicated": costmodels.evaluate(g, MESH, "", TOPO, outputs=outs)}
  ax = plots.memory_bars(big)
  hbm = big["replicated"].hbm_bytes / GIB
  lines = [l for l in ax.get_lines() if l.get_label().startswith("HBM")]
  assert lines and lines[0].get_ydata()[0] == pytest.approx(hbm)
  assert big["replicated"].peak_memory_bytes / GIB > 0.1 * hbm
  assert "off the chart" not in ax.get_title()


def test_time_breakdown_adds_up_to_the_step_time(reports):
  ax = plots.time_breakdown(reports)
  heights = _bar_heights(ax)
  assert list(heights)[0] == "compute"
  assert {"comm data (ici)", "comm model (ici)"} <= set(heights)
  totals = np.sum([h for h in heights.values()], axis=0)
  expected = [r.step_time_s * 1e3 for r in reports.values()]
  assert totals == pytest.approx(expected, rel=1e-9)


def test_pareto_front_plots_every_point(tmp_path):
  g, outs = _graph()
  front, table = autolayout.pareto(g, MESH, outs, TOPO)
  ax = plots.pareto_front(front, hbm_bytes=16 * 10**9)
  pts = ax.get_lines()[1]  # the markers, after the step line
  xs, ys = pts.get_xdata(), pts.get_ydata()
  assert sorted(xs) == pytest.approx(sorted(
      r.peak_memory_bytes / GIB for r in front))
  assert sorted(ys) == pytest.approx(sorted(r.step_time_s * 1e3
                                            for r in front))
  # The table form draws the same points.
  ax2 = plots.pareto_front(table, annotate=False)
  assert list(ax2.get_lines()[1].get_xdata()) == list(xs)
  path = plots.save(ax, tmp_path / "front.png")
  assert path.stat().st_size > 5000


def test_mesh_ranking_draws_the_ranked_meshes_best_on_top():
  table = pd.DataFrame([
      {"mesh": "x:8", "status": "optimal", "step_time_s": 2e-3},
      {"mesh": "x:2;y:4", "status": "optimal", "step_time_s": 1e-3},
      {"mesh": "x:3;y:3", "status": "no-fit", "step_time_s": None},
  ])
  ax = plots.mesh_ranking(table)
  labels = [t.get_text() for t in ax.get_yticklabels()]
  widths = [p.get_width() for p in ax.patches]
  assert widths == pytest.approx([1.0, 2.0])
  top_down = [l for _, l in sorted(zip(ax.get_yticks(), labels),
                                   reverse=True)]
  assert top_down == ["x:2 x y:4", "x:8"]
  assert any("1 no-fit" in t.get_text() for t in ax.texts)


def test_compare_figure_and_save(reports, tmp_path):
  fig = plots.compare_figure(reports, "title")
  assert len(fig.axes) == 2
  out = plots.save(fig, tmp_path / "cmp.png")
  assert out.stat().st_size > 10000
