"""Benchmark: do convolutions cost their FLOPs, or whole tiles?

Times the calibration's convolution probes (the full plan's ``conv`` and
``conv_filter`` shapes, :func:`costmodels.calibrate.measure.make_plan`) on 8
TF logical CPU devices at once, in shuffled rounds (so that machine noise
spreads over all of them), and prints, per shape, the measured time, the
time per GFLOP relative to the cube, and the fit's price with the tile
:mod:`costmodels.calibrate.conv_tiles` picks and without one.  Ends with one
JSON line: the tiles, the two fits' residuals, and the measured ratios
``width2_over_width16`` (a ``[8, 18, 18, 4, 8]`` volume against ``[8, 4,
18, 18, 8]``, the same FLOPs) and ``out1_per_flop`` (a convolution to one
output channel, time per FLOP over the cube's).

Reproduce:
  python benchmarks/conv_tiles.py            # about 10 s
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--rounds", type=int, default=9)
  args = p.parse_args(argv)
  import mesh_tf as mtf
  mtf.set_logical_cpu_devices(8)
  from costmodels.calibrate import pattern_fit
  from costmodels.calibrate import measure
  full = measure.make_plan(("x:8",))
  plan = measure.Plan((), (), (), (), ("float32",), 5, full.convs,
                      kernel_sizes=(), step_depths=())
  probes = measure.prepare(plan, mtf.logical_cpu_devices(8))
  probes = [q for q in probes if q.sample.group_size == 8
            and q.sample.pattern in ("conv", "conv_filter")]
  times = measure.interleaved(probes, args.rounds)
  samples = [q.measured(t) for q, t in zip(probes, times)]
  out = {}
  for kind in ("conv", "conv_filter"):
    rows = [s for s in samples if s.pattern == kind]
    (tiled,) = pattern_fit.fit_patterns(rows, "float32", 8, 0.0)
    (plain,) = pattern_fit.fit_patterns([s._replace(conv=()) for s in rows],
                                    "float32", 8, 0.0)
    cube = rows[0].seconds / rows[0].flops
    print(f"{kind}: tile {tiled.tile or 'none'}; relative residual "
          f"{tiled.rel_residual:.1%} tiled, {plain.rel_residual:.1%} without")
    print(f"  {'out width, in, out ch':>22} {'MFLOP':>7} {'measured':>9} "
          f"{'per FLOP':>9} {'tiled fit':>10} {'untiled':>8}")
    for s in rows:
      def price(f, s=s):
        return f.time_s(s.flops, s.nbytes, input_bytes=s.input_bytes,
                        conv=s.conv)
      print(f"  {str(s.conv):>22} {s.flops / 1e6:7.1f} "
            f"{s.seconds * 1e3:7.3f}ms {s.seconds / s.flops / cube:8.2f}x "
            f"{price(tiled) * 1e3:8.3f}ms {price(plain) * 1e3:6.3f}ms")
    by_dims = {s.conv: s for s in rows}
    out[kind] = {"tile": list(tiled.tile),
                 "residual_tiled": round(tiled.rel_residual, 4),
                 "residual_untiled": round(plain.rel_residual, 4),
                 "width2_over_width16": round(
                     by_dims[(2, 8, 8)].seconds
                     / by_dims[(16, 8, 8)].seconds, 3),
                 "out1_per_flop": round(
                     by_dims[(14, 8, 1)].seconds / by_dims[(14, 8, 1)].flops
                     / cube, 3)}
  print(json.dumps(out))
  return out


if __name__ == "__main__":
  main()
