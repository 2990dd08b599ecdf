"""Mesh TensorFlow's ``mtf.auto_mtf``: ``layout`` and
``layout_and_mesh_shape``, answered by mesh-tf's CP-SAT layout optimizer
(:func:`mesh_tf.auto_layout`).

Objective.  The original's auto_mtf chose the layout with the smallest peak
memory per device.  Without a ``topology`` these functions do the same
(``objective="memory"``), and among equally small layouts pick the one with
the least predicted step time on a neutral machine: ``n`` H100 GPUs on one
NVSwitch, every pair equally connected (the topology named
``"h100x<n>-nodes1"``).  Give a ``topology`` (a preset name such as
``"tpu-v4-2x2x2"`` or a ``costmodels.Topology``) to minimise predicted step
time on that hardware instead.

OR-Tools is imported only when a function is called.
"""

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import MtfError

__all__ = ["layout", "layout_and_mesh_shape"]


def _neutral_topology(num_devices):
  return f"h100x{num_devices}-nodes1"


def _solve(graph, mesh_shape, outputs, topology, time_limit_s, forbid=()):
  from mesh_tf.auto_mtf.door import auto_layout  # pylint: disable=g-import-not-at-top
  mesh_shape = dims_lib.convert_to_shape(mesh_shape)
  outputs = list(outputs) or None
  if topology is None:
    return auto_layout(graph, mesh_shape, outputs,
                       topology=_neutral_topology(mesh_shape.size),
                       objective="memory", tie_break=("time",),
                       time_limit_s=time_limit_s, forbid=forbid)
  return auto_layout(graph, mesh_shape, outputs, topology=topology,
                     objective="time", time_limit_s=time_limit_s,
                     forbid=forbid)


def layout(mtf_graph, mesh_shape, mtf_outputs=(), topology=None,
           time_limit_s=60.0, forbid=()):
  """The layout rules for ``mtf_graph`` on ``mesh_shape`` (Mesh TF's
  ``auto_mtf.layout``).

  Args:
    mtf_graph: the mtf Graph.
    mesh_shape: a Shape or string such as ``"rows:2;cols:4"``.
    mtf_outputs: tensors whose values are exported (default: those no op
      reads).
    topology: None for Mesh TF's objective (least peak memory, see the
      module docstring), or hardware to minimise predicted step time on.
    time_limit_s: CP-SAT time limit.
    forbid: ``(dim name, mesh axis name)`` pairs the answer must not use.

  Returns:
    :class:`mesh_tf.LayoutRules`.

  Example:
    >>> rules = mtf.auto_mtf.layout(graph, "rows:2;cols:4", [loss])  # doctest: +SKIP
  """
  return _solve(mtf_graph, mesh_shape, mtf_outputs, topology,
                time_limit_s, forbid).rules


def layout_and_mesh_shape(mtf_graph, num_processors, mtf_outputs=(),
                          max_mesh_shape_dimensions=2, topology=None,
                          time_limit_s=60.0):
  """A mesh shape of ``num_processors`` and its layout rules (Mesh TF's
  ``auto_mtf.layout_and_mesh_shape``).

  Every factorisation of ``num_processors`` into at most
  ``max_mesh_shape_dimensions`` axes of non-increasing sizes (named
  ``mesh_0``, ``mesh_1``..., as Mesh TF enumerated them) is solved; the best by the objective (see the module docstring) wins, ties
  going to fewer axes.

  Returns:
    ``(layout_rules, mesh_shape)``.

  Raises:
    MtfError: if ``num_processors`` or ``max_mesh_shape_dimensions`` is not
      a positive integer.
  """
  if int(num_processors) < 1 or int(max_mesh_shape_dimensions) < 1:
    raise MtfError(
        f"layout_and_mesh_shape needs num_processors >= 1 and "
        f"max_mesh_shape_dimensions >= 1, got {num_processors} and "
        f"{max_mesh_shape_dimensions}")
  best = None
  for sizes in _factorizations(int(num_processors),
                               int(max_mesh_shape_dimensions)):
    shape = dims_lib.Shape([dims_lib.Dimension(f"mesh_{i}", s)
                            for i, s in enumerate(sizes)])
    r = _solve(mtf_graph, shape, mtf_outputs, topology, time_limit_s)
    key = ((r.peak_memory_bytes, r.step_time_s) if topology is None
           else (r.step_time_s, r.peak_memory_bytes)) + (len(sizes),)
    if best is None or key < best[0]:
      best = (key, r.rules, shape)
  return best[1], best[2]


def _factorizations(n, max_axes):
  """Factorisations of ``n`` into 1..max_axes factors > 1, each in
  non-increasing order as Mesh TF's mesh shapes are (``(4, 2)``, not
  ``(2, 4)``), largest first factor first; ``(1,)`` for ``n == 1``."""
  if n == 1:
    return [(1,)]
  out = []

  def rec(rest, prefix):
    if rest == 1:
      out.append(tuple(prefix))
      return
    if len(prefix) == max_axes:
      return
    for f in range(min(rest, prefix[-1] if prefix else rest), 1, -1):
      if rest % f == 0:
        rec(rest // f, prefix + [f])
  rec(n, [])
  return out
