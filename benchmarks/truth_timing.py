"""Timing the truth benchmark's layouts: steady steps in shuffled rounds,
extra passes, the contenders' run-off, and calibration probes timed beside
them (``benchmarks/cost_model_truth.py`` and its 2-process part
``benchmarks/cost_model_truth_cluster.py`` both use these)."""

import statistics
import time
from typing import NamedTuple, Tuple


def training_graph(build):
  """A fresh model with its SGD training step built on its graph (what
  TrainStep adds), for pricing and solving."""
  from mesh_tf.training import optimize
  from mesh_tf.gradients import gradients
  model = build()
  variables = list(model.graph.trainable_variables)
  grads = gradients([model.loss], [v.outputs[0] for v in variables])
  optimize.SgdOptimizer(0.01).apply_grads(grads, variables)
  return model


def same_layout(mesh_a, rules_a, mesh_b, rules_b):
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
    if not found and same_layout(m, r, mesh, rules):
      out.append((f"auto = {label}", m, r))
      found = True
    else:
      out.append((label, m, r))
  return out if found else out + [("auto", mesh, rules)]


def is_auto(label):
  """Whether a row's label is the solver's layout (see :func:`with_auto`)."""
  return label == "auto" or label.startswith("auto = ")


class Row(NamedTuple):
  """One layout of one model in the benchmark.

  ``measured_s`` is the median of all its timed steps (``times``: the main
  rounds', then the run-off's if it was a contender, see :func:`runoff`),
  ``fastest_s`` the fastest of them, ``main_s`` the median of the main
  rounds' alone; ``predicted_s`` is read from the interleaved fit,
  ``predicted_upfront_s`` from the up-front calibration file,
  ``predicted_other_s`` from a second file (``--also-topology``: e.g. the
  full calibration beside a quick one), or None."""
  label: str
  mesh: str
  rules: str
  predicted_s: float
  measured_s: float
  fastest_s: float
  predicted_upfront_s: float
  times: Tuple[float, ...] = ()
  main_s: float = None
  predicted_other_s: float = None


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


def time_probe(probe):
  """Timings of one calibration probe in a round: a probe that is a whole
  training step is timed as the layouts' steps are (``STEP_CALLS`` calls
  after one of its own), any other probe once."""
  if is_step(probe):
    probe.once()
    return [probe.once() for _ in range(STEP_CALLS)]
  return [probe.once()]


def is_step(probe):
  return probe.sample.what in ("step", "model_step")


def statistic(probe, default):
  """How ``probe``'s interleaved timings are summarised (see run_model)."""
  return "median" if is_step(probe) else default


