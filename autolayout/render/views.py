"""What the HTML report draws, as plain values taken from the JSON output.

The report is one more renderer of the records ``--format json`` writes
(:func:`autolayout.cli.output.layout_record`): every number it shows is
read from such a record, so the page and the JSON agree by construction.
The only values that are not in the JSON are the per-category memory over
the step's schedule (the JSON has the peak step only) and the
counterfactuals of each rule, both taken from the same
:class:`costmodels.CostReport` the record was written from.

Example:
  >>> terms = time_terms({"compute_time_s": 2.0, "interference_time_s": 0.5,
  ...                     "comm_time_by_axis_s": {"data": 1.0},
  ...                     "hidden_comm_time_s": 3.0, "step_time_s": 3.5})
  >>> [(t.name, t.seconds, t.in_step) for t in terms]
  ... # doctest: +NORMALIZE_WHITESPACE
  [('compute', 2.0, True), ('exposed comm data', 1.0, True),
   ('interference', 0.5, True), ('hidden comm', 3.0, False)]
"""

from typing import Any, NamedTuple, Optional, Tuple

import numpy as np

CATEGORY_ORDER = ("params", "gradients", "optimizer", "activations",
                  "kv_cache")
# Longest memory curve drawn; longer schedules keep each bucket's largest
# step (the peak survives).  A GPT-3 step has ~10^4 steps: a page of that
# many points per category is slow to hover.
MAX_POINTS = 1500


class TimeTerm(NamedTuple):
  """One term of the step-time decomposition: ``in_step`` terms sum to the
  step time; hidden communication runs under compute and is not added."""
  name: str
  seconds: float
  in_step: bool


class MemoryCurve(NamedTuple):
  """Per-device bytes of each category at each drawn memory step, and
  the most each category reaches over the whole step (``most``)."""
  steps: Tuple[int, ...]
  by_category: Tuple[Tuple[str, Tuple[int, ...]], ...]
  peak_step: int
  peak_bytes: int
  peak_op: str
  most: Tuple[Tuple[str, int], ...] = ()


class Counterfactual(NamedTuple):
  """A rule or decision, and the step time and peak memory without it
  (None: not priced, ``note`` says why)."""
  kind: str            # "rule" or "decision"
  what: str            # "d_ff:model" or "zero_stage=3"
  otherwise: str       # what the alternative is
  step_time_s: Optional[float]
  peak_memory_bytes: Optional[int]
  note: str = ""


class LayoutView(NamedTuple):
  """One layout of the page: its JSON ``record``, the memory curve, and the
  counterfactuals of its rules and decisions."""
  label: str
  record: dict
  memory: Optional[MemoryCurve]
  counterfactuals: Tuple[Counterfactual, ...]
  chosen: bool


def time_terms(record):
  """The step-time decomposition of a JSON layout record: compute, exposed
  communication per mesh axis, interference, the pipeline bubble (when
  the record has one), then hidden communication (not in the step)."""
  terms = [TimeTerm("compute", record["compute_time_s"], True)]
  for axis, s in record["comm_time_by_axis_s"].items():
    terms.append(TimeTerm(f"exposed comm {axis}", s, True))
  if record.get("interference_time_s"):
    terms.append(TimeTerm("interference", record["interference_time_s"],
                          True))
  if record.get("bubble_time_s"):
    terms.append(TimeTerm("bubble", record["bubble_time_s"], True))
  terms.append(TimeTerm("hidden comm", record["hidden_comm_time_s"], False))
  return terms


def memory_curve(report, most=MAX_POINTS):
  """The :class:`MemoryCurve` of a CostReport (None if it has no steps)."""
  prof = report.memory
  per = prof.bytes_by_category_step
  total = np.asarray(prof.bytes_by_step)
  if not len(total) or not per:
    return None
  n = len(total)
  if n <= most:
    picks = np.arange(n)
  else:   # each bucket's largest step, and the peak itself
    edges = np.linspace(0, n, most + 1).astype(int)
    picks = np.unique(np.concatenate(
        [[a + int(np.argmax(total[a:b])) for a, b in zip(edges, edges[1:])
          if b > a], [prof.peak_step]]))
  cats = sorted(per, key=lambda c: (CATEGORY_ORDER.index(c)
                                    if c in CATEGORY_ORDER else 99, c))
  return MemoryCurve(
      tuple(int(i) for i in picks),
      tuple((c, tuple(int(v) for v in np.asarray(per[c])[picks]))
            for c in cats if np.asarray(per[c]).any()),
      int(prof.peak_step), int(prof.peak_bytes),
      getattr(prof.peak_op, "name", "") or "",
      tuple((c, int(np.asarray(per[c]).max())) for c in cats))


class _Repeats:
  """How often each record runs per step, read back from a report's own
  priced records, so a counterfactual prices a microbatched step as the
  report did (:func:`costmodels.evaluate`'s ``microbatches``)."""

  def __init__(self, report):
    self._by_op = {c.op_name: c.repeats for c in report.op_costs}

  def repeats(self, op_name):
    return self._by_op.get(op_name, 1)


def rule_counterfactuals(report, outputs=None, most=24):
  """For each rule of ``report``'s layout (at most ``most``), the step time
  and peak memory without it, priced by :func:`costmodels.evaluate` as the
  report was.  The report is priced again first; if that does not give its
  own step time back (a step built in a way this cannot repeat), every
  rule says so instead of showing numbers that do not compare."""
  import costmodels
  from mesh_tf.core.errors import MtfError
  from mesh_tf.core.layout import LayoutRules
  enabled = bool(report.overlap is not None and report.overlap.enabled)

  def price(rules):
    return costmodels.evaluate(
        report.graph, report.mesh_shape, rules, report.topology,
        outputs=outputs, microbatches=_Repeats(report), overlap=enabled,
        memory_reserve_fraction=report.memory_reserve_fraction)

  pairs = list(report.layout_rules.pairs)
  again = price(report.layout_rules)
  same = (abs(again.step_time_s - report.step_time_s)
          <= 1e-9 * max(report.step_time_s, 1e-30)
          and again.peak_memory_bytes == report.peak_memory_bytes)
  out = []
  for i, (d, a) in enumerate(pairs[:most]):
    what = f"{d}:{a if isinstance(a, str) else '+'.join(a)}"
    if not same:
      out.append(Counterfactual("rule", what, f"{d} replicated", None, None,
                                "not priced: `mtf-layout explain` on the "
                                "plan prices it"))
      continue
    try:
      r = price(LayoutRules(pairs[:i] + pairs[i + 1:]))
      out.append(Counterfactual("rule", what, f"{d} replicated",
                                r.step_time_s, int(r.peak_memory_bytes)))
    except MtfError as e:
      out.append(Counterfactual("rule", what, f"{d} replicated", None, None,
                                f"invalid without it: {e}"))
  return tuple(out)


def decision_counterfactuals(training):
  """For each training decision of a JSON ``training`` record, the fastest
  candidate the search priced that differs in that decision (its step
  time; the search keeps no peak for it).  ``()`` without a record."""
  if not training:
    return ()
  chosen = training["decisions"]
  out = []
  for key, value in chosen.items():
    best = None
    for c in training.get("candidates", ()):
      d = c["decisions"]
      if d.get(key) == value or c.get("step_time_s") is None:
        continue
      if best is None or c["step_time_s"] < best["step_time_s"]:
        best = c
    what = f"{key}={_text(value)}"
    if best is None:
      out.append(Counterfactual("decision", what, "-", None, None,
                                "no other value was priced (over budget, "
                                "or fixed)"))
    else:
      out.append(Counterfactual(
          "decision", what, f"{key}={_text(best['decisions'][key])}",
          best["step_time_s"], None, "fastest such candidate tried"))
  return tuple(out)


def _text(v):
  if isinstance(v, dict):
    return ",".join(f"{k}={x}" for k, x in v.items())
  return str(v)


def layout_view(label, record, report: Any = None, chosen=False,
                outputs=None, counterfactuals=True):
  """A :class:`LayoutView` of a JSON record and the report it came from."""
  cf = ()
  if report is not None and counterfactuals:
    cf = rule_counterfactuals(report, outputs)
  cf = cf + decision_counterfactuals(record.get("training"))
  return LayoutView(label, record,
                    memory_curve(report) if report is not None else None,
                    cf, chosen)
