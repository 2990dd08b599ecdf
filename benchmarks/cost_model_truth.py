"""Benchmark: does the cost model predict measured step times, and rank
layouts as the machine does?

On 8 TF logical CPU devices (meshes ``a:2;b:4`` and ``x:8``) it

1. calibrates the devices (``costmodels.calibrate``, in a subprocess) and
   writes the topology file (or reads one given with ``--topology``); the
   solver's auto layout is chosen with it;
2. for each zoo model (tiny Transformer, MLP, MoE, 3-D conv net, at sizes
   where a training step takes 10-500 ms here) builds at least 12 layouts:
   replicated, pure data parallel, pure model parallel, mixed, the solver's
   auto layout (solved with the calibrated topology) and a few deliberately
   bad ones;
3. lowers each layout's training step (``mesh_tf.training.TrainStep``,
   SGD), warms it up, then times steady steps (``STEP_CALLS`` calls in a
   row after one untimed call) in shuffled rounds over the layouts *and
   every calibration probe* (so that machine noise spreads over all of
   them, and the fit sees the machine the steps see; each round then
   passes over the steps alone ``--step-passes`` - 1 more times, see
   :data:`STEP_PASSES`), keeps each layout's median of its ``--rounds`` x
   ``--step-passes`` x ``STEP_CALLS`` steps, fits the probes' medians and
   writes that
   topology file (``<file>-<model>.json``); the predictions are read from
   it as ``-t FILE.json`` reads it; then the contenders for the best step
   (within 10% of it, and the auto layout) are timed again, side by side,
   in as many steps more (``--runoff-rounds``; see :func:`runoff`);
4. prints, per model, the table of predicted and measured step times,
   Spearman and Kendall rank correlations, median and worst absolute %
   error, and the auto layout's measured step over the best measured one;
   saves a log-log predicted-vs-measured scatter (``--plot``);
5. ends with one JSON line: ``spearman_min``, ``kendall_min``,
   ``median_abs_err``, ``worst_abs_err``, ``auto_vs_best_max`` and
   ``load_max`` (the largest load ratio of the models).

Targets (issue 15): Spearman >= 0.9 per model, median error <= 25%, auto
within 1.05x of the best measured layout.

``--cluster`` adds one model on a 2-process mesh ``hosts:2;local:4`` (two
``mtf-worker``s on 127.0.0.1, calibrated on their own for the auto layout,
then predicted from calibration probes timed in the same rounds as its
steps, as above).

Reproduce:
  python benchmarks/cost_model_truth.py                 # full
  python benchmarks/cost_model_truth.py --cluster       # and 2 processes:
                                                        # 19-21 min here
  python benchmarks/cost_model_truth.py --quick --models mlp --rounds 3
"""

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from typing import NamedTuple, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MESHES = ("x:8", "a:2;b:4")


def _models():
  """name -> (builder of a fresh ModelGraph, [(label, mesh, rules)])."""
  from mesh_tf import models
  tr = dict(layers=2, d_model=64, heads=8, d_kv=16, d_ff=256, vocab=512,
            length=32, batch=16)
  mo = dict(layers=2, d_model=64, heads=8, d_kv=8, d_ff=128, vocab=256,
            length=16, batch=16, experts=8)
  lm_layouts = [
      ("replicated", "x:8", ""),
      ("data", "x:8", "batch:x"),
      ("model", "x:8", "heads:x;d_ff:x;vocab:x"),
      ("model-ffn", "x:8", "d_ff:x"),
      ("mixed", "a:2;b:4", "batch:a;heads:b;d_ff:b;vocab:b"),
      ("mixed-swap", "a:2;b:4", "batch:b;heads:a;d_ff:a;vocab:a"),
      ("data-2d", "a:2;b:4", "batch:b"),
      ("data+vocab", "a:2;b:4", "batch:b;vocab:a"),
      ("bad-d_model", "x:8", "d_model:x"),
      ("bad-length", "x:8", "length:x"),
      ("bad-d_kv", "a:2;b:4", "d_kv:a;d_model:b"),
      ("heads-only", "a:2;b:4", "heads:b"),
  ]
  moe_layouts = lm_layouts[:8] + [
      ("experts", "x:8", "experts:x"),
      ("batch+experts", "a:2;b:4", "batch:a;experts:b"),
      ("bad-d_model", "x:8", "d_model:x"),
      ("bad-length", "a:2;b:4", "length:a;d_model:b"),
  ]
  mlp_layouts = [
      ("replicated", "x:8", ""),
      ("data", "x:8", "batch:x"),
      ("model", "x:8", "d_ff:x"),
      ("model-classes", "x:8", "d_ff:x;classes:x"),
      ("mixed", "a:2;b:4", "batch:a;d_ff:b"),
      ("mixed-swap", "a:2;b:4", "batch:b;d_ff:a"),
      ("data-2d", "a:2;b:4", "batch:b"),
      ("data+classes", "a:2;b:4", "batch:b;classes:a"),
      ("ffn-2d", "a:2;b:4", "d_ff:b"),
      ("bad-d_model", "x:8", "d_model:x"),
      ("bad-mixed", "a:2;b:4", "d_model:a;batch:b"),
      ("bad-both", "a:2;b:4", "d_model:b;d_ff:a"),
  ]
  conv_layouts = [
      ("replicated", "x:8", ""),
      ("data", "x:8", "batch:x"),
      ("depth", "x:8", "depth:x"),
      ("channels", "x:8", "channels:x"),
      ("mixed", "a:2;b:4", "batch:a;depth:b"),
      ("mixed-swap", "a:2;b:4", "batch:b;depth:a"),
      ("batch+channels", "a:2;b:4", "batch:b;channels:a"),
      ("height", "a:2;b:4", "height:b"),
      ("depth+height", "a:2;b:4", "depth:a;height:b"),
      ("width", "x:8", "width:x"),
      ("bad-classes", "a:2;b:4", "classes:a;channels:b"),
      ("bad-width", "a:2;b:4", "width:a;filters:b"),
  ]
  return {
      "transformer": (lambda: models.transformer_lm(**tr), lm_layouts),
      "mlp": (lambda: models.mlp(layers=4, batch=64, d_model=256, d_ff=1024,
                                 classes=64), mlp_layouts),
      "moe": (lambda: models.moe_transformer_lm(**mo), moe_layouts),
      "conv3d": (lambda: models.conv3d_net(layers=2, batch=8, depth=16,
                                           height=16, width=16, channels=8,
                                           classes=4), conv_layouts),
  }


def _training_graph(build):
  """A fresh model with its SGD training step built on its graph (what
  TrainStep adds), for pricing and solving."""
  from mesh_tf.training import optimize
  from mesh_tf.gradients import gradients
  model = build()
  variables = list(model.graph.trainable_variables)
  grads = gradients([model.loss], [v.outputs[0] for v in variables])
  optimize.SgdOptimizer(0.01).apply_grads(grads, variables)
  return model


def _auto(build, topology):
  """The solver's layout: the best of its answers on both meshes."""
  import autolayout
  best = None
  for mesh in MESHES:
    model = _training_graph(build)
    r = autolayout.auto_layout(model.graph, mesh, None, topology=topology,
                               time_limit_s=30.0)
    if best is None or r.report.step_time_s < best[2]:
      best = (mesh, str(r.rules), r.report.step_time_s)
  return best[0], best[1]


def _same_layout(mesh_a, rules_a, mesh_b, rules_b):
  """Whether two (mesh, rules) pairs are one layout (rule order aside)."""
  def rule_set(r):
    return frozenset(x.strip() for x in str(r).split(";") if x.strip())
  return (mesh_a.replace(" ", "") == mesh_b.replace(" ", "")
          and rule_set(rules_a) == rule_set(rules_b))


def with_auto(layouts, mesh, rules):
  """``layouts`` ``[(label, mesh, rules)]`` with the solver's layout: a row
  ``auto``, or, where it is one of them, that row relabelled
  ``auto = <label>``.  One program is measured once: timed twice, as two
  rows, its two medians differed by 5-10% on a shared machine, and the
  auto layout was then compared with the faster copy of itself."""
  out, found = [], False
  for label, m, r in layouts:
    if not found and _same_layout(m, r, mesh, rules):
      out.append((f"auto = {label}", m, r))
      found = True
    else:
      out.append((label, m, r))
  return out if found else out + [("auto", mesh, rules)]


def is_auto(label):
  """Whether a row's label is the solver's layout (see :func:`with_auto`)."""
  return label == "auto" or label.startswith("auto = ")


def _rules_text(rules):
  return str(rules) if str(rules) else "(replicated)"


def _predict(build, mesh, rules, topology):
  import costmodels
  model = _training_graph(build)
  return costmodels.evaluate(model.graph, mesh, rules, topology).step_time_s


def _make_step(build, mesh, rules, devices):
  from mesh_tf import training
  from mesh_tf.training import optimize
  model = build()
  step = training.train_step_for_model(model, mesh, rules, devices,
                                       optimize.SgdOptimizer(0.01))
  feeds = model.random_values(seed=1)
  return step, feeds


def _ranks(xs):
  order = sorted(range(len(xs)), key=lambda i: xs[i])
  ranks = [0.0] * len(xs)
  i = 0
  while i < len(order):
    j = i
    while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
      j += 1
    for k in range(i, j + 1):
      ranks[order[k]] = (i + j) / 2.0
    i = j + 1
  return ranks


def spearman(a, b):
  """Spearman's rank correlation (Pearson of the ranks)."""
  import numpy as np
  ra, rb = np.array(_ranks(a)), np.array(_ranks(b))
  ra, rb = ra - ra.mean(), rb - rb.mean()
  return float((ra @ rb) / np.sqrt((ra @ ra) * (rb @ rb)))


def kendall(a, b):
  """Kendall's tau-b."""
  conc = disc = ta = tb = 0
  for i in range(len(a)):
    for j in range(i + 1, len(a)):
      da, db = a[i] - a[j], b[i] - b[j]
      if da == 0 and db == 0:
        continue
      if da == 0:
        ta += 1
      elif db == 0:
        tb += 1
      elif (da > 0) == (db > 0):
        conc += 1
      else:
        disc += 1
  n0 = conc + disc
  return (conc - disc) / (((n0 + ta) * (n0 + tb)) ** 0.5 or 1.0)


class Row(NamedTuple):
  """One layout of one model in the benchmark.

  ``measured_s`` is the median of all its timed steps (``times``: the main
  rounds', then the run-off's if it was a contender, see :func:`runoff`),
  ``fastest_s`` the fastest of them, ``main_s`` the median of the main
  rounds' alone; ``predicted_s`` is read from the interleaved fit,
  ``predicted_upfront_s`` from the up-front calibration file."""
  label: str
  mesh: str
  rules: str
  predicted_s: float
  measured_s: float
  fastest_s: float
  predicted_upfront_s: float
  times: Tuple[float, ...] = ()
  main_s: float = None


def run_model(name, build, layouts, topology, devices, rounds, console,
              calibration, plan, topo_path, runoff_rounds,
              probe_statistic="mean", step_passes=1):
  """:class:`Row` s of one model, and the machine load.

  ``topology`` (the up-front calibration) picks the auto layout.  Then
  every layout's step and every calibration probe of ``plan``
  (:func:`costmodels.calibrate.measure.prepare`) are timed in the same
  shuffled rounds, so that the fit and the steps see the same machine
  (each step, and each probe that is a whole step, is timed
  :data:`STEP_CALLS` times a round after a call of its own: the steady
  step of a training loop, which the
  cost model prices; a step called right after another layout's runs
  cold, and those timings ranked the layouts worse: Spearman 0.88
  against 0.94 for the Transformer's layouts in one run);
  the probes' medians are fitted (``fit_topology``) and written to
  ``topo_path``, and ``predicted_s`` comes from reading that file back, as
  ``-t FILE.json`` does.  ``predicted_upfront_s`` is the up-front file's
  prediction, and the load is the interleaved reference steps' time over
  the up-front calibration's (about 1 on a quiet machine).

  ``probe_statistic`` is how a probe's timings are summarised.  The mean,
  by default: a probe call takes about a millisecond, a step tens of
  them, and on a machine time-shared with other work the median of short
  calls picks the calls no other process interrupted, while every long
  step is interrupted in proportion to the load; the mean of the short
  calls carries the interruptions in the same proportion.  Probes that
  are whole training steps (``step``, ``model_step``: 2-40 ms, as long as
  the layouts' steps) are summarised as the steps are, by the median: their
  mean carried the bursts of a loaded machine that the steps' medians
  leave out, and priced every layout 30% too slow at a load ratio of 3.8.

  Each main round passes over the steps ``step_passes`` times in all
  (:func:`more_passes`).  After the main rounds, the contenders for the
  best measured step get ``runoff_rounds`` more rounds of their own
  (:func:`runoff`).
  """
  import costmodels
  from costmodels.calibrate import calibration as cal_mod
  from costmodels.calibrate import measure, topology_file
  mesh, rules = _auto(build, topology)
  layouts = with_auto(layouts, mesh, rules)
  steps = []
  for label, mesh, rules in layouts:
    step, feeds = _make_step(build, mesh, rules, devices)
    for _ in range(2):  # lowering, first call, one more warm-up
      step(**feeds).numpy()
    steps.append([label, mesh, rules, lambda s=step, f=feeds:
                  s(**f).numpy(), []])
  probes = measure.prepare(plan, devices)
  for p in probes:
    p.warm()
  probe_times = [[] for _ in probes]
  order = list(range(len(steps) + len(probes)))
  passes = [(s[3], s[4]) for s in steps]
  rng = random.Random(0)
  for _ in range(rounds):
    rng.shuffle(order)
    for i in order:
      if i < len(steps):
        steps[i][4].extend(steady_times(steps[i][3]))
      else:
        k = i - len(steps)
        probe_times[k].extend(time_probe(probes[k]))
    more_passes(passes, step_passes, rng)
  before = runoff([(s[0], s[3], s[4]) for s in steps], runoff_rounds, rng)
  samples = [p.measured(t, _statistic(p, probe_statistic))
             for p, t in zip(probes, probe_times)]
  fitted, fit_rows = cal_mod.fit_topology(samples, calibration["devices"],
                                          os.path.basename(topo_path)[:-5])
  topology_file.write_topology(topo_path, fitted, cal_mod.json_safe({
      "interleaved_with": name, "rounds": rounds,
      "devices": calibration["devices"],
      "fits": [dict(zip(cal_mod.FIT_COLUMNS, r)) for r in fit_rows],
      "samples": [s._asdict() for s in samples],
      "probe_times": {p.label: t for p, t in zip(probes, probe_times)}}))
  interleaved = costmodels.get_topology(topo_path)
  rows = []
  for label, mesh, rules, _, times in steps:
    rows.append(Row(label, mesh, rules, _predict(build, mesh, rules,
                                                 interleaved),
                    statistics.median(times), min(times),
                    _predict(build, mesh, rules, topology), tuple(times),
                    before[label]))
  upfront = {s["flops"]: s["seconds"] for s in calibration.get("samples", ())
             if s["what"] == "step"}
  ratios = [s.seconds / upfront[s.flops] for s in samples
            if s.what == "step" and s.flops in upfront]
  load = statistics.median(ratios) if ratios else None
  console.print(f"[dim]{name}: {len(rows)} layouts and {len(probes)} "
                f"calibration probes x {rounds} rounds -> {topo_path}[/dim]")
  return rows, load


#: Timed calls of a layout's step per round.  One step's time varies by
#: up to +-25% from one call to the next (the executor's order across 8
#: devices on 2 cores; measured on the Transformer's layouts, 5 rounds of
#: 5 calls), so one call a round left each layout's median of 11 rounds
#: uncertain by about 5.6% (bootstrap coefficient of variation, mean over
#: the 12 layouts), more than the gaps between near-tied layouts; 5 calls
#: a round bring it to about 4.0%, for about 30 s more per model.
STEP_CALLS = 5


def steady_times(call, calls=STEP_CALLS):
  """Seconds of ``calls`` steady steps of ``call`` (a step function of no
  arguments), each after a step of its own (see :func:`run_model`)."""
  call()
  times = []
  for _ in range(calls):
    t0 = time.perf_counter()
    call()
    times.append(time.perf_counter() - t0)
  return times


#: Passes a main round makes over the layouts' steps: one beside the
#: calibration probes, the rest over the steps alone, each in a new
#: shuffled order, so the steps are timed all through the probes' rounds.
#: The MoE's 13 layouts span 1.5x, 1-3 ms apart, and each median of 11
#: rounds (55 steps) is uncertain by about 4%: timed in 33 rounds of
#: their own, their Spearman against one prediction was 0.80, 0.87 and 0.95
#: over the three runs of 11 consecutive rounds, 0.87 on average over
#: random sets of 11 rounds, 0.88 over sets of 22 and 0.91 over all 33;
#: two disjoint halves of the 33 rounds ranked the layouts at 0.91 against
#: each other (mean of 20 splits, lowest 0.83).
STEP_PASSES = 3


def more_passes(calls, passes, rng):
  """Times each of ``calls`` (``[(call, times)]``) :data:`STEP_CALLS` more
  steady steps (:func:`steady_times`, appended to its ``times``) in each of
  ``passes - 1`` passes, each in a new shuffled order; none for ``passes``
  of 1 or less."""
  order = list(range(len(calls)))
  for _ in range(passes - 1):
    rng.shuffle(order)
    for i in order:
      call, times = calls[i]
      times.extend(steady_times(call))


#: A layout contends for the best measured step when the median of its
#: main rounds is within this fraction of the best one's.  Each median of
#: 11 rounds x STEP_CALLS steps is uncertain by about 4% (see STEP_CALLS),
#: so near-tied layouts trade places from run to run: the MLP's ``d_ff:x``
#: with and without ``classes:x`` (priced 0.1% apart) were measured 5.7%
#: apart in one full run and 1.1% in the next, and the best of several such
#: medians is the luckiest one, biased low.
RUNOFF_MARGIN = 0.10


def contenders(medians, auto, margin=RUNOFF_MARGIN):
  """The labels of ``medians`` (``{label: seconds}``) within ``margin`` of
  the fastest, and ``auto`` (the solver's layout) whatever its median.

  Example:
    >>> contenders({"a": 10.0, "b": 10.9, "c": 12.0, "d": 20.0}, "d")
    ['a', 'b', 'd']
  """
  best = min(medians.values())
  return [label for label, m in medians.items()
          if m <= (1 + margin) * best or label == auto]


def runoff(steps, rounds, rng, margin=RUNOFF_MARGIN):
  """Times the contenders for the best step again, side by side.

  ``steps`` is ``[(label, call, times)]``, ``times`` holding the main
  rounds' timings of ``call``.  The :func:`contenders` (the solver's
  layout among them) get ``rounds`` more shuffled rounds of
  :data:`STEP_CALLS` steady steps each, appended to their ``times``, so the
  layouts that decide the auto layout's ratio to the best are measured
  from about twice the steps, in rounds a few tenths of a second long that
  the machine's load drifts little over.  The rest keep their main rounds:
  more than ``margin`` slower, no run-off would make them the best.

  Returns:
    ``{label: median of its main rounds}``.
  """
  main = {label: statistics.median(times) for label, _, times in steps}
  auto = next((label for label, _, _ in steps if is_auto(label)), None)
  chosen = set(contenders(main, auto, margin))
  racing = [s for s in steps if s[0] in chosen]
  if len(racing) > 1:
    for _ in range(rounds):
      rng.shuffle(racing)
      for _, call, times in racing:
        times.extend(steady_times(call))
  return main


def auto_vs_best_interval(rows, resamples=2000, seed=0):
  """A 90% bootstrap interval of the auto layout's measured step over the
  best one's: each layout's timings resampled with replacement, the
  medians and their best taken again.  ``None`` without timings."""
  import numpy as np
  if not all(r.times for r in rows):
    return None
  rng = np.random.default_rng(seed)
  ratios = np.empty(resamples)
  auto = next(i for i, r in enumerate(rows) if is_auto(r.label))
  times = [np.asarray(r.times) for r in rows]
  for k in range(resamples):
    meds = [np.median(rng.choice(t, t.size)) for t in times]
    ratios[k] = meds[auto] / min(meds)
  return float(np.quantile(ratios, 0.05)), float(np.quantile(ratios, 0.95))


def time_probe(probe):
  """Timings of one calibration probe in a round: a probe that is a whole
  training step is timed as the layouts' steps are (``STEP_CALLS`` calls
  after one of its own), any other probe once."""
  if _is_step(probe):
    probe.once()
    return [probe.once() for _ in range(STEP_CALLS)]
  return [probe.once()]


def _is_step(probe):
  return probe.sample.what in ("step", "model_step")


def _statistic(probe, default):
  """How ``probe``'s interleaved timings are summarised (see run_model)."""
  return "median" if _is_step(probe) else default


def summarize(name, rows, load=None):
  pred = [r.predicted_s for r in rows]
  meas = [r.measured_s for r in rows]
  errs = [abs(p - m) / m for p, m in zip(pred, meas)]
  auto = next(r for r in rows if is_auto(r.label))
  fastest = [r.fastest_s for r in rows]
  upfront = [r.predicted_upfront_s for r in rows]
  return {"model": name, "spearman": spearman(pred, meas), "load": load,
          "median_abs_err_upfront": statistics.median(
              [abs(p - m) / m for p, m in zip(upfront, meas)]),
          "spearman_upfront": spearman(upfront, meas),
          "spearman_fastest": spearman(pred, fastest),
          "median_abs_err_fastest": statistics.median(
              [abs(p - m) / m for p, m in zip(pred, fastest)]),
          "kendall": kendall(pred, meas),
          "median_abs_err": statistics.median(errs),
          "worst_abs_err": max(errs),
          "auto_vs_best": auto.measured_s / min(meas),
          "auto_vs_best_main": auto.main_s / min(r.main_s for r in rows),
          "auto_vs_best_interval": auto_vs_best_interval(rows)}


def _table(console, name, rows, summary):
  from rich.table import Table
  t = Table(title=f"{name}: predicted vs measured training step "
            "(8 logical CPU devices)")
  for c in ("layout", "mesh", "rules", "predicted", "measured", "error",
            "fastest"):
    t.add_column(c, justify="left" if c in ("layout", "mesh", "rules")
                 else "right", overflow="fold")
  t.add_column("steps", justify="right")
  for r in sorted(rows, key=lambda r: r.measured_s):
    label, mesh, rules, p, m, fastest = r[:6]
    t.add_row(label, mesh, _rules_text(rules), f"{p * 1e3:.2f} ms",
              f"{m * 1e3:.2f} ms", f"{(p - m) / m:+.0%}",
              f"{fastest * 1e3:.2f} ms", str(len(r.times)))
  console.print(t)
  console.print(
      f"{name}: Spearman {summary['spearman']:.3f}, Kendall "
      f"{summary['kendall']:.3f}, median |err| "
      f"{summary['median_abs_err']:.1%}, worst |err| "
      f"{summary['worst_abs_err']:.1%}, auto / best measured "
      f"{summary['auto_vs_best']:.3f}  (against each layout's fastest step: "
      f"Spearman {summary['spearman_fastest']:.3f}, median |err| "
      f"{summary['median_abs_err_fastest']:.1%})")
  interval = summary.get("auto_vs_best_interval")
  if interval:
    console.print(
        f"{name}: auto / best measured {summary['auto_vs_best']:.3f} "
        f"(90% bootstrap interval {interval[0]:.3f}-{interval[1]:.3f}); "
        f"{summary['auto_vs_best_main']:.3f} from the main rounds alone, "
        "before the contenders' run-off")
  if summary.get("load"):
    console.print(
        f"{name}: machine load: the interleaved reference steps ran "
        f"{summary['load']:.2f}x their time in the up-front calibration; "
        "predicted from the up-front file instead: Spearman "
        f"{summary['spearman_upfront']:.3f}, median |err| "
        f"{summary['median_abs_err_upfront']:.1%}")


def _plot(path, results):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(6, 6))
  lo, hi = float("inf"), 0.0
  for name, rows in results.items():
    p = [r.predicted_s * 1e3 for r in rows]
    m = [r.measured_s * 1e3 for r in rows]
    ax.scatter(m, p, label=name, s=22)
    lo, hi = min(lo, *p, *m), max(hi, *p, *m)
  ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="predicted = measured")
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlabel("measured step (ms)")
  ax.set_ylabel("predicted step (ms)")
  ax.set_title("cost model vs measured, 8 logical CPU devices")
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--topology", help="a calibrated topology file to use "
                 "instead of calibrating first")
  p.add_argument("--quick", action="store_true",
                 help="quick calibration (about 20 s instead of 60)")
  p.add_argument("--models", nargs="+", default=list(_models()),
                 choices=list(_models()))
  p.add_argument("--rounds", type=int, default=11,
                 help="rounds over the layouts and probes, each timing "
                 "STEP_CALLS steady steps of every layout (the median of "
                 "all of them is kept); default 11")
  p.add_argument("--step-passes", type=int, default=STEP_PASSES,
                 help="passes over the layouts' steps a round makes: one "
                 "beside the probes, the rest over the steps alone "
                 f"(default {STEP_PASSES})")
  p.add_argument("--runoff-rounds", type=int,
                 help="more rounds for the contenders for the best step "
                 "(within 10%% of it, and the auto layout); default: "
                 "--rounds x --step-passes (the steps' main rounds again)")
  p.add_argument("--plot", default=os.path.join(
      tempfile.gettempdir(), "cost_model_truth.png"))
  p.add_argument("--save-topology", help="where to keep the calibrated file")
  p.add_argument("--probe-statistic", choices=("mean", "median"),
                 default="mean", help="how the interleaved calibration "
                 "probes' timings are summarised (default mean; see "
                 "run_model)")
  p.add_argument("--cluster", action="store_true",
                 help="also run the MLP on a 2-process hosts:2;local:4 mesh")
  args = p.parse_args(argv)
  from rich.console import Console
  console = Console(stderr=True)
  out = Console(width=150)  # whole rules, also when piped to a file
  import costmodels
  from costmodels import calibrate as cal_lib
  if args.topology:
    topo_path = args.topology
  else:
    topo_path = args.save_topology or os.path.join(
        tempfile.mkdtemp(), "cpu8.json")
    t0 = time.perf_counter()
    cal_lib.calibrate(topo_path, cpu_devices=8, meshes=MESHES,
                      quick=args.quick, progress=console)
    out.print(f"calibrated 8 logical CPU devices in "
              f"{time.perf_counter() - t0:.1f} s -> {topo_path}")
  topology = costmodels.get_topology(topo_path)
  import mesh_tf as mtf
  mtf.set_logical_cpu_devices(8)
  devices = mtf.logical_cpu_devices(8)
  results, summaries = {}, []
  meta = cal_lib.read_topology_file(topo_path)[1]
  if "devices" not in meta:
    raise SystemExit(f"{topo_path} has no calibration metadata; calibrate "
                     "with this benchmark or `mtf-layout calibrate`")
  from costmodels.calibrate import measure
  plan = measure.make_plan(MESHES, args.quick)
  runoff_rounds = (args.rounds * max(args.step_passes, 1)
                   if args.runoff_rounds is None else args.runoff_rounds)
  zoo = _models()
  for name in args.models:
    build, layouts = zoo[name]
    rows, load = run_model(
        name, build, layouts, topology, devices, args.rounds, console, meta,
        plan, topo_path[:-5] + f"-{name}.json", runoff_rounds,
        args.probe_statistic, args.step_passes)
    results[name] = rows
    s = summarize(name, rows, load)
    summaries.append(s)
    _table(out, name, rows, s)
  if args.cluster:
    from benchmarks import cost_model_truth_cluster
    name, rows = cost_model_truth_cluster.run(args.rounds, runoff_rounds,
                                              args.quick, console,
                                              args.step_passes)
    results[name] = rows
    s = summarize(name, rows)
    summaries.append(s)
    _table(out, name, rows, s)
  _plot(args.plot, results)
  out.print(f"scatter plot: {args.plot}")
  final = {"spearman_min": min(s["spearman"] for s in summaries),
           "kendall_min": min(s["kendall"] for s in summaries),
           # The worst model's median, so that every model must meet it.
           "median_abs_err": max(s["median_abs_err"] for s in summaries),
           "worst_abs_err": max(s["worst_abs_err"] for s in summaries),
           "auto_vs_best_max": max(s["auto_vs_best"] for s in summaries)}
  loads = [s["load"] for s in summaries if s.get("load")]
  if loads:  # how much slower the machine was than at the up-front calibration
    final["load_max"] = max(loads)
  sys.stdout.flush()
  print(json.dumps({k: round(v, 4) for k, v in final.items()}))


if __name__ == "__main__":
  main()
