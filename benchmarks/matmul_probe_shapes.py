"""Benchmark: does a plain matmul's time on 8 logical CPU devices follow its
FLOPs or the bytes it moves?

Calibration (``costmodels.calibrate``) fits each contraction pattern as
``T = latency + flops / rate + bytes / bandwidth``.  The default plan's
plain-matmul probes are square products at one batch size: their FLOPs and
bytes grow together, so the fit cannot tell the two terms apart.  This
benchmark times those probes beside shapes that vary one at a fixed other:
the same FLOPs with about twice the bytes, and half the FLOPs with the same
bytes.  All of them run on every device at once, as calibration runs them,
in shuffled rounds.  It prints each probe's median time, then calibration's
fit (``costmodels.calibrate.pattern_fit.fit_patterns``) of the default probes alone
and of all of them, each with its relative residual.

Its last line is one JSON object: ``equal_flops_time_ratio``
(time of the more-bytes shape over its equal-FLOPs partner, mean of the
pairs; near 1 if time follows the FLOPs, near 2 if the bytes),
``equal_bytes_time_ratio`` (half the FLOPs at equal bytes; near 0.5 if time
follows the FLOPs, near 1 if the bytes), and the two fits as ``[latency_s,
flops_per_s, bytes_per_s, rel_residual]`` (null: no such term).

Measured on the 2-core machine (two runs of 7 rounds): equal FLOPs
1.04x and 1.16x, equal bytes 0.51x and 0.62x.  The default probes alone
fitted a latency and a FLOP rate with no byte term in both runs (216-301 us
+ 31-44 GFLOP/s), while the calibrations of the same day fitted the same
probes with no latency and a byte term of 1.1-2.3 GB/s: which term wins
flips with noise.  With the varied shapes the fit keeps both (192-280 us +
32-50 GFLOP/s + 7-16 GB/s).  Time follows the FLOPs far more than the
bytes.

Reproduce:
  python benchmarks/matmul_probe_shapes.py            # about 1 min
  python benchmarks/matmul_probe_shapes.py --rounds 11
"""

import argparse
import json
import math
import os
import random
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

#: The default plan's plain products (costmodels.calibrate.measure).
DEFAULT = [("matmul", "abc,cd->abd", (16, 32, k), (k, k))
           for k in (64, 128, 256)] + [
               ("matmul", "abc,abd->cd", (16, 32, 64), (16, 32, 256))]
#: ``(label, probe, partner index in DEFAULT)``: shapes that vary FLOPs or
#: bytes against a default probe.
VARIED = [
    ("equal flops", ("matmul", "abc,cd->abd", (64, 32, 32), (32, 32)), 0),
    ("equal flops", ("matmul", "abc,abd->cd", (64, 32, 32), (64, 32, 128)),
     3),
    ("equal bytes", ("matmul", "abc,cd->abd", (16, 32, 64), (64, 512)), 2),
]


def _fit(samples):
  """Calibration's own fit of these timings (``fit_patterns``, launch cost
  0): ``[latency_s, flops_per_s, bytes_per_s, rel_residual]``, None for a
  term it does not use."""
  from costmodels.calibrate import pattern_fit
  (f,) = pattern_fit.fit_patterns(samples, "float32", 8, 0.0)
  return [f.latency_s, f.flops_per_s if math.isfinite(f.flops_per_s) else
          None, f.bandwidth_bytes_per_s
          if math.isfinite(f.bandwidth_bytes_per_s) else None,
          f.rel_residual]


def _fit_text(fit):
  lat, rate, bw, res = fit
  rate_s = f"{rate / 1e9:.1f} GFLOP/s" if rate else "no FLOP term"
  bw_s = f"{bw / 1e9:.2f} GB/s" if bw else "no byte term"
  return f"{lat * 1e6:.0f} us + {rate_s} + {bw_s} (residual {res:.1%})"


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--rounds", type=int, default=7,
                 help="timed calls of every probe, in shuffled rounds")
  args = p.parse_args(argv)
  import mesh_tf as mtf
  mtf.set_logical_cpu_devices(8)
  devices = mtf.logical_cpu_devices(8)
  from costmodels.calibrate import measure
  from costmodels.calibrate import probes as probes_lib
  from mesh_tf.lowering.placement import PlacementMeshImpl
  einsums = DEFAULT + [v[1] for v in VARIED]
  plan = measure.make_plan(("x:8",), quick=True)._replace(
      einsums=tuple(einsums), convs=())
  impl = PlacementMeshImpl("x:8", "", devices)
  probes = [q for q in probes_lib.compute_probes(impl, plan, "float32", 4,
                                                  lambda out: None)
            if q.sample.what == "matmul"]
  for q in probes:
    q.warm()
  times = [[] for _ in probes]
  rng = random.Random(0)
  for _ in range(args.rounds):
    for i in rng.sample(range(len(probes)), len(probes)):
      times[i].append(probes[i].once())
  samples = [q.measured(t, "median") for q, t in zip(probes, times)]
  for (_, eq, xs, ws), s in zip(einsums, samples):
    print(f"{eq:14s} {str(xs):14s} x {str(ws):14s} {s.flops / 1e6:7.2f} "
          f"MFLOP {s.nbytes / 1e6:6.3f} MB {s.seconds * 1e6:8.1f} us")
  flops_ratios, bytes_ratios = [], []
  for k, (label, _, partner) in enumerate(VARIED):
    ratio = samples[len(DEFAULT) + k].seconds / samples[partner].seconds
    (flops_ratios if label == "equal flops" else bytes_ratios).append(ratio)
    print(f"{label}: time {ratio:.2f}x its partner's, bytes "
          f"{samples[len(DEFAULT) + k].nbytes / samples[partner].nbytes:.2f}x,"
          f" FLOPs {samples[len(DEFAULT) + k].flops / samples[partner].flops:.2f}x")
  default_fit = _fit(samples[:len(DEFAULT)])
  all_fit = _fit(samples)
  print("fit on the default probes:", _fit_text(default_fit))
  print("fit on all probes:        ", _fit_text(all_fit))
  print(json.dumps({
      "equal_flops_time_ratio": round(statistics.mean(flops_ratios), 3),
      "equal_bytes_time_ratio": round(statistics.mean(bytes_ratios), 3),
      "default_fit": default_fit, "all_fit": all_fit}))


if __name__ == "__main__":
  main()
