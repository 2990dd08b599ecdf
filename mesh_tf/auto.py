"""``mtf.auto_layout`` and ``mtf.auto_mesh_and_layout``: thin wrappers that
import :mod:`autolayout` (and OR-Tools) only when called."""


def auto_layout(graph, mesh_shape, outputs=None, topology="dgx-h100",
                memory_budget=None, objective="time", time_limit_s=60.0,
                **kwargs):
  """The layout rules minimising predicted step time; see
  :func:`autolayout.auto_layout`.  Returns a ``LayoutResult``."""
  import autolayout
  return autolayout.auto_layout(graph, mesh_shape, outputs, topology=topology,
                                memory_budget=memory_budget,
                                objective=objective,
                                time_limit_s=time_limit_s, **kwargs)


def auto_mesh_and_layout(graph, num_devices, outputs=None,
                         topology="dgx-h100", **kwargs):
  """Every mesh shape of ``num_devices`` that fits ``topology``, each with
  its optimal layout, ranked; see :func:`autolayout.auto_mesh_and_layout`.
  Returns ``(results, table)``."""
  import autolayout
  return autolayout.auto_mesh_and_layout(graph, num_devices, outputs,
                                         topology=topology, **kwargs)


def load_plan(path, graph=None, name=None, outputs=()):
  """Reads a plan file (``docs/plan_files.md``); with ``graph``, checks that
  the graph is the one the plan was made for and names what changed.  See
  :func:`autolayout.plan_file.load_plan`.  Returns a ``Plan``."""
  import autolayout
  return autolayout.load_plan(path, graph, name, outputs)


__all__ = ["auto_layout", "auto_mesh_and_layout", "load_plan"]
