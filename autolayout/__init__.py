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
:mod:`autolayout.cli`; plans as files (:mod:`~autolayout.plan`,
:mod:`~autolayout.plan_file`), :func:`diff` of two plans
(:mod:`~autolayout.plan_diff`), warm re-solves
(:mod:`~autolayout.plan_hint`) and exporters to other frameworks
(:mod:`autolayout.export`).
"""

# CP-SAT before anything that may load TensorFlow: importing mesh_tf
# applies the rule (mesh_tf.startup.import_order says why).
import mesh_tf.startup.import_order  # noqa: F401  isort:skip

from autolayout.errors import (AutoLayoutError, ExportError, ImportOrderError,
                               InfeasibleLayoutError, PlanError,
                               PlanFormatError, PlanMismatchError,
                               SolverError)
from autolayout.result import LayoutResult, ModelSize
from autolayout.solve import LayoutSearch, validate
from autolayout.explain import explain
# auto_layout of a given mesh is autolayout.solve's; this one has the CLI's
# defaults (autolayout.default_search): it also searches the mesh when given
# none, and the training decisions when nothing fits.
from autolayout.default_search import auto_layout
from autolayout.mesh_search import auto_mesh_and_layout, mesh_factorizations
from autolayout.pareto import pareto
from autolayout.view import (build_view, dims_used_together, repeated_ops,
                             splittable_dims, to_dot, write_dot,
                             write_graphml)
from autolayout.assignments import all_layouts
from autolayout.plan import Plan, make_plan
from autolayout.plan_file import load_plan
from autolayout.plan_diff import diff

__all__ = ["AutoLayoutError", "ImportOrderError", "InfeasibleLayoutError",
           "SolverError", "PlanError", "PlanFormatError", "PlanMismatchError",
           "ExportError",
           "LayoutResult", "LayoutSearch", "ModelSize", "explain",
           "auto_layout", "auto_mesh_and_layout",
           "mesh_factorizations", "pareto", "validate", "build_view",
           "dims_used_together", "repeated_ops", "splittable_dims", "to_dot",
           "write_dot", "write_graphml", "all_layouts", "Plan", "make_plan",
           "load_plan", "diff"]
