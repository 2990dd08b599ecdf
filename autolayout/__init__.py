"""autolayout: the layout search of mesh-tf.

Finds the layout rules (and optionally the mesh shape) that minimise the
step time :func:`costmodels.evaluate` predicts on a topology, under a
per-device memory budget, with an exact integer program solved by OR-Tools
CP-SAT.

Modules: :mod:`~autolayout.search.view` (networkx view of named dims),
:mod:`~autolayout.explain` (why each rule),
:mod:`~autolayout.search.assignments` (valid local assignments),
:mod:`~autolayout.search.tables` (per-op cost tables), :mod:`~autolayout.search.formulation`
(the program, written out as math), :mod:`~autolayout.search.solve` (solve and
validate; :class:`LayoutSearch` holds one graph's tables for every query),
:mod:`~autolayout.search.result`, :mod:`~autolayout.meshes.mesh_search`,
:mod:`~autolayout.pareto` and the ``mtf-layout`` CLI,
:mod:`autolayout.cli`; plans as files (:mod:`~autolayout.plans.plan`,
:mod:`~autolayout.plans.file`), :func:`diff` of two plans
(:mod:`~autolayout.plans.diff`), warm re-solves
(:mod:`~autolayout.plans.hint`) and exporters to other frameworks
(:mod:`autolayout.plans.export`).
"""

# CP-SAT before anything that may load TensorFlow: importing mesh_tf
# applies the rule (mesh_tf.startup.import_order says why).
import mesh_tf.startup.import_order  # noqa: F401  isort:skip

from autolayout.errors import (AutoLayoutError, ExportError, ImportOrderError,
                               InfeasibleLayoutError, PlanError,
                               PlanFormatError, PlanMismatchError,
                               SolverError)
from autolayout.search.result import LayoutResult, ModelSize
from autolayout.spec import SearchSpec, SolverOptions, search_spec
from autolayout.search.solve import LayoutSearch, validate
from autolayout.search.explain import explain
# auto_layout of a given mesh is autolayout.search.solve's; this one has the CLI's
# defaults (autolayout.default_search): it also searches the mesh when given
# none, and the training decisions when nothing fits.
from autolayout.default_search import auto_layout
from autolayout.meshes.mesh_search import auto_mesh_and_layout, mesh_factorizations
from autolayout.search.pareto import pareto
from autolayout.search.view import (build_view, dims_used_together, repeated_ops,
                                    splittable_dims, to_dot, write_dot,
                                    write_graphml)
from autolayout.search.assignments import all_layouts
from autolayout.plans.plan import Plan, make_plan
from autolayout.plans.decisions import load_plan
from autolayout.plans.diff import diff
# ``autolayout.solve`` (the module) as before the sub-packages.
from autolayout.search import solve

__all__ = ["AutoLayoutError", "ImportOrderError", "InfeasibleLayoutError",
           "SolverError", "PlanError", "PlanFormatError", "PlanMismatchError",
           "ExportError",
           "LayoutResult", "LayoutSearch", "ModelSize", "SearchSpec",
           "SolverOptions", "search_spec", "explain",
           "auto_layout", "auto_mesh_and_layout",
           "mesh_factorizations", "pareto", "validate", "build_view",
           "dims_used_together", "repeated_ops", "splittable_dims", "to_dot",
           "write_dot", "write_graphml", "all_layouts", "Plan", "make_plan",
           "load_plan", "diff"]
