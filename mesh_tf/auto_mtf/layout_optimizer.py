"""Mesh TensorFlow's ``auto_mtf.layout_optimizer``: the layout of least
peak memory, as a string such as ``"a:m2;c:m1"``.

The original built its own CP-SAT program here: peak memory as the live
tensors of one fixed operation order (its ``scheduler``), ties going to the
layout that splits more dims.  mesh-tf has one layout optimizer,
:mod:`autolayout` (reached through :mod:`mesh_tf.auto_mtf.door`), so
:class:`LayoutOptimizer` is a thin adapter over it:

* :meth:`LayoutOptimizer.solve` asks it for the layout of least peak memory
  (the same query as :func:`mesh_tf.auto_mtf.layout` without a topology),
  forbidding every (dim, mesh axis) pair the original's splittability
  refuses (:class:`~mesh_tf.auto_mtf.valid_layouts.LayoutValidator`).
  Peak memory is mesh-tf's cost model's (:mod:`costmodels.memory`: live
  tensors under its own memory-aware order, variables included), and
  equally small layouts are ranked by predicted step time, then by fewer
  splits.  One rule of the original's tie-break is kept because it changes
  neither memory nor time: a mesh axis of size 1 that the answer leaves
  unused is given the first (by name) unassigned dim it validly splits.
* :meth:`LayoutOptimizer.evaluate_layout` is that same cost model's peak
  per-device bytes; a layout mesh-tf cannot lay out (a dim its axis does
  not divide, an unknown axis) is worth ``inf`` (the original computed it
  anyway, rounding slices down).

``scheduler_alg`` is accepted for the original's signature; the cost model
orders operations itself.  Errors of the search (such as
``autolayout.InfeasibleLayoutError``) are ``mtf.MtfError`` subclasses.
"""

import math

from mesh_tf.auto_mtf import api, door
from mesh_tf.core import layout as layout_lib
from mesh_tf.core.errors import InvalidArgumentError, MtfError

__all__ = ["LayoutOptimizer"]


class LayoutOptimizer:
  """The layout of least peak memory of a MemoryEstimator's graph and mesh.

  Args:
    memory_estimator: a
      :class:`~mesh_tf.auto_mtf.memory_estimator.MemoryEstimator`.
    scheduler_alg: ``"NAIVE"`` or ``"LIST"``; accepted, not used (see the
      module docstring).
    time_limit_s: the CP-SAT time limit.

  Raises:
    InvalidArgumentError: for an unknown ``scheduler_alg``.
  """

  def __init__(self, memory_estimator, scheduler_alg="LIST",
               time_limit_s=60.0):
    if scheduler_alg not in ("NAIVE", "LIST"):
      raise InvalidArgumentError(
          f"scheduler_alg={scheduler_alg!r} names no scheduler; use 'NAIVE'"
          " or 'LIST'")
    self._estimator = memory_estimator
    self._validator = memory_estimator.get_layout_validator()
    self._time_limit_s = time_limit_s

  def _dim_names(self):
    graph = self._estimator.mtf_graph
    return sorted({d.name for op in graph.operations
                   for t in list(op.inputs) + list(op.outputs)
                   for d in t.shape})

  def solve(self, print_solution=False):
    """The layout of least peak memory, as ``"dim:axis;..."`` sorted by
    dim (``""`` when nothing is split).

    Args:
      print_solution: print the layout.

    Raises:
      mtf.MtfError: the search's errors (no layout fits, the solver failed).
    """
    est = self._estimator
    sizes = self._validator.mesh_dimension_name_to_size
    dims = self._dim_names()
    forbid = tuple((d, a) for d in dims for a in sizes
                   if not self._validator.is_valid_assignment(d, a))
    rules = api.layout(est.mtf_graph, est.mesh_shape, est.mtf_outputs,
                       time_limit_s=self._time_limit_s, forbid=forbid)
    pairs = dict(rules)
    used = set(pairs.values())
    for axis in sorted(a for a, n in sizes.items() if n == 1):
      if axis in used:
        continue
      free = [d for d in dims if d not in pairs
              and self._validator.is_valid_assignment(d, axis)]
      if free:
        pairs[free[0]] = axis
        used.add(axis)
    layout = ";".join(f"{d}:{a}" for d, a in sorted(pairs.items()))
    if print_solution:
      print(layout)
    return layout

  def evaluate_layout(self, layout):
    """Peak per-device bytes of ``layout`` (a string such as
    ``"d_ff:m1;heads:m2"``) by mesh-tf's cost model; ``inf`` if mesh-tf
    cannot lay it out.  Pairs naming an unsplittable dim are skipped, as the
    original did."""
    pairs = []
    for pair in filter(None, (layout or "").split(";")):
      dim, _, axis = pair.partition(":")
      if dim in self._validator.splittable_mtf_dimension_names:
        pairs.append((dim, axis))
    est = self._estimator
    try:
      rules = layout_lib.LayoutRules(pairs)
      peak, _, _ = door.peak_memory(est.mtf_graph, est.mesh_shape, rules,
                                    outputs=est.mtf_outputs or None)
    except MtfError:
      return math.inf
    return float(peak)

