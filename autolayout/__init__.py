"""autolayout: the layout search of mesh-tf.

Finds the layout rules (and optionally the mesh shape) that minimise the
step time :func:`costmodels.evaluate` predicts on a topology, under a
per-device memory budget, with an exact integer program solved by OR-Tools
CP-SAT.

One query is one typed :class:`SearchSpec` (:mod:`autolayout.spec`),
built once at the edge (the CLI, :func:`auto_layout`, the notebooks).  The
parts, one concept each, layered one way (``.importlinter``):

* :mod:`autolayout.cli`: the ``mtf-layout`` command line;
* :mod:`autolayout.default_search`: the default question, shared by the
  API and the CLI;
* :mod:`autolayout.meshes`: the mesh-shape search; :mod:`autolayout.plans`:
  plans as values and files, diff, warm re-solves (hint), exports and runs;
* :mod:`autolayout.training`: the training-decision families (one
  registry, :mod:`autolayout.training.families`) and their search;
* :mod:`autolayout.search`: one graph on one mesh: the networkx view,
  valid assignments, cost tables, the CP-SAT program (written out as math
  in :mod:`~autolayout.search.formulation`), the search state, phases and
  query, :class:`LayoutResult`, the Pareto front and ``explain``;
* :mod:`autolayout.spec`, :mod:`autolayout.arguments`,
  :mod:`autolayout.errors`: the query, its checks and the errors.
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
