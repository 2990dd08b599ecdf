"""Graphs where one dim name has several sizes (pad, slice, halo exchanges,
local attention): the cost model prices them exactly as they lower, and the
search picks among the layouts that divide every size."""

import pytest

import costmodels as cm
import mesh_tf as mtf
from autolayout.search import assignments
from tests.costmodels.test_evaluate import (assert_prediction_matches_lowering,
                                            build)

# d_model=3 splits on no axis, so the least-memory layout must split length.
B, D = mtf.Dimension("batch", 4), mtf.Dimension("d_model", 3)


def local_attention(mesh):
  """``length`` is 16 in x and 4 (the block count) inside the attention."""
  x = mtf.get_variable(mesh, "x", [B, mtf.Dimension("length", 16), D])
  y = mtf.layers.masked_local_attention_1d(
      x, mtf.Dimension("d_kv", 4), mtf.Dimension("heads", 2), window_size=4,
      length_per_split=4)
  return [mtf.reduce_sum(y * y)]


def pad_and_slice(mesh):
  """``length`` is 8, then 12 padded, then 8 sliced back (shifted by one)."""
  x = mtf.get_variable(mesh, "x", [B, mtf.Dimension("length", 8), D])
  p = mtf.pad(x, [2, 2], "length")
  s = mtf.slice(p, 1, 8, "length")
  return [mtf.reduce_sum(s * x)]


def halo(mesh):
  """halo_exchange grows each block of ``length`` (8 blocks of 4 -> 6)."""
  blocks = mtf.Dimension("length", 8)
  x = mtf.get_variable(mesh, "x", [B, blocks, mtf.Dimension("block", 4), D])
  h = mtf.halo_exchange(x, blocks, mtf.Dimension("block", 4), 1)
  return [mtf.reduce_sum(h * h)]


def conv_with_blocks(mesh):
  """Each block of ``h`` (4 blocks of 4 rows) grows by a one-row halo."""
  x = mtf.get_variable(mesh, "x", [B, mtf.Dimension("length", 4),
                                   mtf.Dimension("h", 4),
                                   mtf.Dimension("w", 4), D])
  y = mtf.layers.conv2d_with_blocks(x, mtf.Dimension("out", 2),
                                    h_blocks_dim="length")
  return [mtf.reduce_sum(y * y)]


def local_2d_attention(mesh):
  """Blocks of rows (``length``) and columns, each with its neighbours'."""
  x = mtf.get_variable(mesh, "x", [B, mtf.Dimension("length", 4),
                                   mtf.Dimension("wb", 2),
                                   mtf.Dimension("h", 2),
                                   mtf.Dimension("w", 2), D])
  y = mtf.layers.local_2d_self_attention_spatial_blocks(
      x, mtf.Dimension("d_kv", 2), mtf.Dimension("heads", 2))
  return [mtf.reduce_sum(y * y)]


def compressed(mesh):
  """compress_mean shortens ``length`` from 16 to 4 and keeps its name."""
  x = mtf.get_variable(mesh, "x", [B, mtf.Dimension("length", 16), D])
  c = mtf.layers.compress_mean(x, "length", 4)
  return [mtf.reduce_sum(c * c)]


GRAPHS = {"local_attention": local_attention, "pad_and_slice": pad_and_slice,
          "halo": halo, "conv_with_blocks": conv_with_blocks,
          "local_2d_attention": local_2d_attention, "compressed": compressed}


@pytest.mark.parametrize("fn", sorted(GRAPHS))
@pytest.mark.parametrize("layout", ["", "batch:rows", "length:cols",
                                    "batch:rows;length:cols"])
def test_prediction_equals_the_lowering(fn, layout):
  g, mesh, outputs = build(GRAPHS[fn])
  report, impl = assert_prediction_matches_lowering(
      g, mesh, "rows:2;cols:4", layout, outputs, "tpu-v5e-2x4")
  if "length" in layout and fn not in ("pad_and_slice", "compressed"):
    assert impl.trace.collectives, "a split length exchanges halos"


@pytest.mark.parametrize("fn", sorted(GRAPHS))
def test_auto_layout_returns_a_layout_priced_as_it_lowers(fn):
  g, mesh, outputs = build(GRAPHS[fn])
  # Least memory with cols kept for length: length is split.
  others = {d.name for t in g.tensors for d in t.shape} - {"length"}
  result = mtf.auto_layout(g, "rows:2;cols:4", outputs=outputs,
                           topology="tpu-v5e-2x4", objective="memory",
                           forbid=[(d, "cols") for d in sorted(others)])
  assert "length" in result.rules.as_dict(), result
  _, impl = assert_prediction_matches_lowering(
      g, mesh, "rows:2;cols:4", result.rules, outputs, "tpu-v5e-2x4")
  if fn not in ("pad_and_slice", "compressed"):
    assert impl.trace.collectives
  assert result.step_time_s == pytest.approx(cm.evaluate(
      g, "rows:2;cols:4", result.rules, "tpu-v5e-2x4",
      outputs=outputs).step_time_s, rel=1e-9)


def test_an_option_divides_every_size_of_the_name():
  g, _, _ = build(pad_and_slice)  # length: 8 and 12
  space = assignments.dim_space(g, "a:4;b:8")
  assert space.all_sizes["length"] == (8, 12)
  assert space.options["length"] == ("a",)  # 8 does not divide 12
  assert space.sizes["length"] == 12


def test_an_indivisible_size_is_named_as_name_equals_size():
  g, mesh, outputs = build(pad_and_slice)
  with pytest.raises(mtf.MtfError, match=r"length=12"):
    cm.evaluate(g, "x:8", "length:x", "tpu-v5e-2x4", outputs=outputs)


def test_mesh_tf_auto_mtf_lays_out_a_local_attention_graph():
  g, mesh, outputs = build(local_attention)
  rules = mtf.auto_mtf.layout(g, "rows:2;cols:4", outputs)
  assert_prediction_matches_lowering(g, mesh, "rows:2;cols:4", rules,
                                     outputs, "tpu-v5e-2x4")
  rules, shape = mtf.auto_mtf.layout_and_mesh_shape(g, 8, outputs)
  assert shape.size == 8


def test_a_plan_of_such_a_graph_saves_and_loads(tmp_path):
  g, _, outputs = build(pad_and_slice)
  result = mtf.auto_layout(g, "rows:2;cols:4", outputs=outputs,
                           topology="tpu-v5e-2x4")
  path = str(tmp_path / "plan.json")
  saved = result.save(path, name="pad_and_slice")
  assert mtf.load_plan(path, g) == saved
  assert saved.model.dim_sizes()["length"] == (8, 12)
