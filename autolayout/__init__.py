"""autolayout: the layout search of mesh-tf.

Finds the layout rules (and optionally the mesh shape) that minimise the
step time :func:`costmodels.evaluate` predicts on a topology, under a
per-device memory budget, with an exact integer program solved by OR-Tools
CP-SAT.

Modules: :mod:`~autolayout.view` (networkx view of named dims),
:mod:`~autolayout.explain` (why each rule),
:mod:`~autolayout.assignments` (valid local assignments),
:mod:`~autolayout.tables` (per-op cost tables), :mod:`~autolayout.formulation`
(the program, written out as math), :mod:`~autolayout.solve` (solve and
validate; :class:`LayoutSearch` holds one graph's tables for every query),
:mod:`~autolayout.result`, :mod:`~autolayout.mesh_search`,
:mod:`~autolayout.pareto` and the ``mtf-layout`` CLI,
:mod:`autolayout.cli`.
"""

# CP-SAT before anything that may load TensorFlow: importing mesh_tf
# applies the rule (mesh_tf.import_order says why).
import mesh_tf.import_order  # noqa: F401  isort:skip

from autolayout.errors import (AutoLayoutError, ImportOrderError,
                               InfeasibleLayoutError, SolverError)
from autolayout.result import LayoutResult, ModelSize
from autolayout.solve import LayoutSearch, auto_layout, validate
from autolayout.explain import explain
from autolayout.mesh_search import auto_mesh_and_layout, mesh_factorizations
from autolayout.pareto import pareto
from autolayout.view import (build_view, dims_used_together, repeated_ops,
                             splittable_dims, to_dot, write_dot,
                             write_graphml)
from autolayout.assignments import all_layouts

__all__ = ["AutoLayoutError", "ImportOrderError", "InfeasibleLayoutError",
           "SolverError",
           "LayoutResult", "LayoutSearch", "ModelSize", "explain",
           "auto_layout", "auto_mesh_and_layout",
           "mesh_factorizations", "pareto", "validate", "build_view",
           "dims_used_together", "repeated_ops", "splittable_dims", "to_dot",
           "write_dot", "write_graphml", "all_layouts"]
