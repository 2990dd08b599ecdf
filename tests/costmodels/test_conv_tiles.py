"""Convolution tiles: the records' kernel dims, the rounded-up FLOPs a
tiled fit prices, fitting a tile from synthetic timings made with a known
one, and the topology file.  No timing is asserted (see
benchmarks/cost_model_truth.py)."""

import json
import math
import random

import pytest

import costmodels
from costmodels import compute
from costmodels.calibrate import conv_tiles, measure, probes, topology_file
from costmodels.calibrate import least_squares
from costmodels.calibrate import pattern_fit
from costmodels.calibrate import timings
from costmodels.calibrate.timings import Sample
from costmodels.compute_fits import ComputeClassFit, tiled_flops
from mesh_tf import models
from mesh_tf.lowering.trace import ComputeRecord

TILE = (8, 1, 4)


def _conv_records(rules, mesh="x:8"):
  model = models.conv3d_net(layers=2, batch=8, depth=16, height=16,
                            width=16, channels=8, classes=4)
  from mesh_tf.gradients import gradients
  variables = list(model.graph.trainable_variables)
  gradients([model.loss], [v.outputs[0] for v in variables])
  trace = costmodels.trace_graph(model.graph, mesh, rules)
  return {r.op_name: r.conv for r in trace.compute if r.conv}, trace


# --- the records -----------------------------------------------------------------
def test_conv_records_carry_their_kernels_width_and_channels():
  depth, _ = _conv_records("depth:x")
  width, _ = _conv_records("width:x")
  channels, _ = _conv_records("channels:x")
  assert depth["conv_1/conv"] == (16, 8, 8)
  assert width["conv_1/conv"] == (2, 8, 8)
  # The input gradient is a convolution from the filters to the channels.
  assert channels["conv_1/conv"] == (16, 1, 8)
  assert channels["conv_1/conv/grad_input"] == (16, 8, 1)
  assert channels["conv_1/conv/grad_filter"] == (16, 1, 8)
  assert set(depth) == set(width) == {
      "conv_0/conv", "conv_1/conv", "conv_1/conv/grad_input",
      "conv_1/conv/grad_filter", "conv_0/conv/grad_filter"}


def test_a_tiled_fit_prices_a_thin_width_above_the_same_flops():
  fit = ComputeClassFit("conv", 1e-5, 1e10, 4e9, tile=TILE)
  chip = costmodels.get_topology("dgx-h100").chip._replace(
      compute_fits=(fit, fit._replace(pattern="conv_filter")),
      launch_overhead_s=2e-5)
  topo = costmodels.get_topology("dgx-h100")._replace(chip=chip)
  untiled = topo._replace(chip=chip._replace(compute_fits=tuple(
      f._replace(tile=()) for f in chip.compute_fits)))
  _, dtrace = _conv_records("depth:x")
  _, wtrace = _conv_records("width:x")
  depth = [compute.compute_time(r, chip) for r in dtrace.compute if r.conv]
  width = [compute.compute_time(r, chip) for r in wtrace.compute if r.conv]
  plain = [compute.compute_time(r, untiled.chip)
           for r in wtrace.compute if r.conv]
  # Width 2 of a block of 8: four times the FLOPs of the depth split.
  assert sum(width) > 2 * sum(depth)
  assert sum(plain) == pytest.approx(sum(depth))
  rec = ComputeRecord("c", 10**7, 10**5, 0, "bfloat16", True, "conv",
                      conv=(2, 8, 1))
  assert compute.compute_time(rec, chip) == pytest.approx(
      2e-5 + 1e-5 + 16 * 10**7 / 1e10 + 10**5 / 4e9)


def test_tiled_flops_rounds_each_dim_up_to_whole_blocks():
  assert tiled_flops(100, (3, 5, 1), (4, 1, 8)) == pytest.approx(
      100 * 4 / 3 * 8)
  assert tiled_flops(100, (16, 8, 8), (8, 4, 8)) == 100
  assert tiled_flops(100, (), TILE) == tiled_flops(100, (2, 2, 2), ()) == 100


# --- the fit ---------------------------------------------------------------------
def _plan_rows(kind, tile, noise=0.0, rng=None):
  """Synthetic timings of the full plan's ``kind`` probes, made from a fit
  with ``tile`` (and a term in the bytes read)."""
  rng = rng or random.Random(0)
  truth = ComputeClassFit(kind, 2e-4, 2e10, 8e9, 0.0, 0, 1e8, tile)
  launch = 3e-5
  rows = []
  for k, (n, v, c, f, ks) in measure.make_plan(("x:8",)).convs:
    if k != kind:
      continue
    xs, ws, os_, flops = probes.conv_shapes(kind, n, v, c, f, ks)
    read = (math.prod(xs) + math.prod(ws)) * 4
    nbytes = read + math.prod(os_) * 4
    dims = probes.conv_dims(v, c, f, ks)
    t = launch + truth.time_s(flops, nbytes, input_bytes=read, conv=dims)
    rows.append(Sample("matmul", "", 8, nbytes, float(flops),
                       t * (1 + rng.uniform(-noise, noise)), pattern=kind,
                       input_bytes=read, conv=dims))
  return rows, launch


@pytest.mark.parametrize("kind", ["conv", "conv_filter"])
@pytest.mark.parametrize("tile", [TILE, (16, 1, 8), (1, 1, 8), (4, 2, 1)])
def test_the_fit_recovers_the_tile_the_timings_were_made_with(kind, tile):
  rows, launch = _plan_rows(kind, tile)
  (got,) = pattern_fit.fit_patterns(rows, "float32", 8, launch)
  assert got.tile == tile
  assert got.flops_per_s == pytest.approx(2e10, rel=1e-3)
  assert got.input_bandwidth_bytes_per_s == pytest.approx(1e8, rel=1e-3)
  assert got.rel_residual < 1e-6


def test_timings_without_a_tile_fit_none_even_with_noise():
  for seed in range(5):
    rows, launch = _plan_rows("conv", (), noise=0.03,
                              rng=random.Random(seed))
    (got,) = pattern_fit.fit_patterns(rows, "float32", 8, launch)
    assert got.tile == ()
  # Noise does not hide a real tile either.
  rows, launch = _plan_rows("conv", TILE, noise=0.03)
  (got,) = pattern_fit.fit_patterns(rows, "float32", 8, launch)
  assert got.tile == TILE


def test_too_few_shapes_or_old_samples_fit_no_tile():
  rows, launch = _plan_rows("conv", TILE)
  xs = [[1.0, s.flops, s.nbytes] for s in rows]
  ys = [s.seconds for s in rows]
  few = rows[:conv_tiles.MIN_SHAPES - 1]
  assert conv_tiles.best_tile(few, xs[:len(few)], ys[:len(few)],
                              least_squares.nonneg_lstsq) == ((), xs[:len(few)])
  old = [s._replace(conv=()) for s in rows]
  (got,) = pattern_fit.fit_patterns(old, "float32", 8, launch)
  assert got.tile == ()
  # Fewer thin shapes than a tile of few shapes needs: none either.
  thin = _quick_rows("conv", (1, 1, 4))[0][:conv_tiles.THIN_SHAPES - 1]
  (got,) = pattern_fit.fit_patterns(thin, "float32", 8, launch)
  assert got.tile == ()


def _quick_rows(kind, tile):
  """Synthetic timings of the quick plan's ``kind`` probes (a full shape
  and the three thin ones), made from a FLOP rate and ``tile``."""
  truth = ComputeClassFit(kind, 2e-4, 2e10, tile=tile)
  launch = 3e-5
  rows = []
  for k, (n, v, c, f, ks) in measure.make_plan(("x:8",), quick=True).convs:
    if k == kind:
      xs, ws, os_, flops = probes.conv_shapes(kind, n, v, c, f, ks)
      dims = probes.conv_dims(v, c, f, ks)
      rows.append(Sample("matmul", "", 8, 4 * (math.prod(xs) + math.prod(
          os_)), float(flops), launch + truth.time_s(flops, 0, conv=dims),
                         pattern=kind, conv=dims))
  return rows, launch


@pytest.mark.parametrize("kind", ["conv", "conv_filter"])
@pytest.mark.parametrize("tile", [(1, 1, 4), (1, 1, 8), (1, 4, 1),
                                  (1, 2, 8), (4, 1, 1), (8, 1, 4),
                                  (16, 2, 8)])
def test_the_quick_plans_thin_convolutions_recover_their_blocks(kind, tile):
  # The thin-convolution regime: a single output (input) channel costs a
  # whole block of them, an output two columns wide a whole block of
  # columns; the quick plan's four shapes a kind price it.
  rows, launch = _quick_rows(kind, tile)
  assert len(rows) == conv_tiles.THIN_SHAPES + 1
  (got,) = pattern_fit.fit_patterns(rows, "float32", 8, launch)
  assert got.tile == tile
  assert got.flops_per_s == pytest.approx(2e10, rel=1e-6)
  # Without the regime (no tile in the timings): none is invented.
  rows, launch = _quick_rows(kind, ())
  (got,) = pattern_fit.fit_patterns(rows, "float32", 8, launch)
  assert got.tile == ()


def test_conv_shapes_take_a_volume_or_a_cube():
  xs, ws, os_, flops = probes.conv_shapes("conv", 8, (18, 18, 4), 8, 1, 3)
  assert (xs, ws, os_) == ((8, 18, 18, 4, 8), (3, 3, 3, 8, 1),
                           (8, 16, 16, 2, 1))
  assert flops == 2 * 8 * 16 * 16 * 2 * 27 * 8
  assert probes.conv_shapes("conv_filter", 2, 16, 8, 8, 3) == (
      probes.conv_shapes("conv_filter", 2, (16, 16, 16), 8, 8, 3))


# --- the topology file -------------------------------------------------------------
def test_files_keep_the_tile_and_version_6_files_read_without_one(tmp_path):
  fit = ComputeClassFit("conv", 1e-4, 1e10, 4e9, 0.1, 8, 2e8, TILE)
  topo = costmodels.get_topology("dgx-h100")
  topo = topo._replace(chip=topo.chip._replace(compute_fits=(fit,)))
  path = tmp_path / "conv.json"
  topology_file.write_topology(path, topo)
  data = json.loads(path.read_text())
  assert data["chip"]["compute_fits"][0]["tile"] == list(TILE)
  assert topology_file.read_topology(path) == topo
  del data["chip"]["compute_fits"][0]["tile"]
  path.write_text(json.dumps(dict(data, version=6)))
  assert topology_file.read_topology(path).chip.compute_fits[0].tile == ()
  s = Sample("matmul", "", 8, 1, 1.0, 1e-3, pattern="conv", conv=(2, 8, 1))
  assert timings.sample_from_dict(json.loads(json.dumps(s._asdict()))) == s
