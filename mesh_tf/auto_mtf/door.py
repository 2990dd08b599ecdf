"""``mtf.auto_layout`` and ``mtf.auto_mesh_and_layout``: thin wrappers that
import :mod:`autolayout` (and OR-Tools) only when called.

Their defaults are the ``mtf-layout`` CLI's (see
:mod:`autolayout.arguments`): topology ``tpu-v5e-16x16``, the chip's HBM as
the memory budget, the topology's own ``data x model`` mesh, 60 s, 2
workers, seed 0.
"""

import difflib
import inspect

from mesh_tf.core.errors import InvalidArgumentError


def _check_keywords(fn, kwargs, public_name):
  """Unknown keyword arguments are an InvalidArgumentError naming the
  closest valid one (``time_limit`` -> ``time_limit_s``)."""
  names = list(inspect.signature(fn).parameters)
  for key in kwargs:
    if key not in names:
      close = difflib.get_close_matches(key, names, n=1, cutoff=0.5)
      hint = (f"did you mean {close[0]}=?" if close else
              "its arguments are " + ", ".join(names))
      raise InvalidArgumentError(
          f"{public_name}() has no argument {key!r}; {hint}")


def auto_layout(graph, mesh_shape=None, outputs=None, *args, **kwargs):
  """The layout rules minimising predicted step time; see
  :func:`autolayout.auto_layout` for the arguments (``topology``,
  ``memory_budget`` such as ``"16GB"``, ``objective``, ``time_limit_s``,
  ``num_workers``, ``seed``, ``config``...).  Returns a ``LayoutResult``.

  It answers as a bare ``mtf-layout solve`` does (the CLI calls the same
  function): without a mesh it searches mesh shapes, and given the zoo
  ``config`` of a training step that fits no layout, it searches the
  training decisions (bf16, ZeRO stage, recompute, microbatches).

  Raises:
    InvalidArgumentError: for a misused or unknown argument.
  """
  import autolayout
  _check_keywords(autolayout.auto_layout, kwargs, "mtf.auto_layout")
  return autolayout.auto_layout(graph, mesh_shape, outputs, *args, **kwargs)


def auto_mesh_and_layout(graph, num_devices=None, outputs=None, *args,
                         **kwargs):
  """Every mesh shape of ``num_devices`` (default: the topology's chips)
  that fits ``topology``, each with its optimal layout, ranked; see
  :func:`autolayout.auto_mesh_and_layout`.  Returns ``(results, table)``.
  """
  import autolayout
  _check_keywords(autolayout.auto_mesh_and_layout, kwargs,
                  "mtf.auto_mesh_and_layout")
  return autolayout.auto_mesh_and_layout(graph, num_devices, outputs, *args,
                                         **kwargs)


def load_plan(path, graph=None, name=None, outputs=()):
  """Reads a plan file (``docs/plan_files.md``); with ``graph``, checks that
  the graph is the one the plan was made for and names what changed.  See
  :func:`autolayout.plans.file.load_plan`.  Returns a ``Plan``."""
  import autolayout
  return autolayout.load_plan(path, graph, name, outputs)


def peak_memory(graph, mesh_shape, layout_rules, outputs=None):
  """Peak per-device bytes of ``graph`` under a layout, by mesh-tf's cost
  model; see :func:`costmodels.memory.peak_memory` (imported here, on
  call).  Returns ``(peak_bytes, step_index, breakdown)``."""
  from costmodels import memory  # pylint: disable=g-import-not-at-top
  return memory.peak_memory(graph, mesh_shape, layout_rules, outputs=outputs)


__all__ = ["auto_layout", "auto_mesh_and_layout", "load_plan", "peak_memory"]
