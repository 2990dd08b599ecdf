"""SearchSpec, the one typed query (issue 38): built once from what a user
writes, frozen and hashable, and the same answer whether a solve gets the
spec or the loose arguments it was built from."""

import dataclasses

import pytest

import autolayout
import costmodels
import mesh_tf as mtf
from autolayout.spec import SearchSpec, SolverOptions, search_spec
from tests.autolayout import graphs

MESH = "rows:2;cols:4"


def test_search_spec_resolves_and_parses_once_into_types():
  spec = search_spec(topology="dgx-h100", mesh_shape="rows:2, cols:4",
                     memory_budget="8GB", time_limit_s=10, seed=3,
                     tie_break="memory", forbid="batch:rows",
                     fixed={"microbatches": 2})
  assert isinstance(spec.topology, costmodels.Topology)
  assert spec.mesh_shape == mtf.convert_to_mesh_shape(MESH)
  assert spec.memory_budget == 8 * 10**9
  assert spec.solver == SolverOptions(10.0, 2, 3, ("memory",),
                                      (("batch", "rows"),), ())
  assert spec.fixed_decisions == {"microbatches": 2}
  # A value: frozen, hashable, replaced by copy.
  assert hash(spec) == hash(dataclasses.replace(spec))
  with pytest.raises(dataclasses.FrozenInstanceError):
    spec.objective = "comm"
  # Typed parts pass through unchanged: nothing is resolved twice.
  again = search_spec(topology=spec.topology, mesh_shape=spec.mesh_shape,
                      memory_budget=spec.memory_budget, time_limit_s=10,
                      seed=3, tie_break=("memory",), forbid=spec.solver.forbid,
                      fixed=spec.fixed_decisions)
  assert again == spec and again.topology is spec.topology


def test_search_spec_errors_name_the_argument():
  with pytest.raises(mtf.InvalidArgumentError, match="num_workers=0 is out "
                     "of range"):
    search_spec(topology="dgx-h100", num_workers=0)
  with pytest.raises(mtf.InvalidArgumentError, match="unknown objective"):
    search_spec(topology="dgx-h100", objective="speed")
  with pytest.raises(costmodels.TopologyError):
    search_spec(topology="tpu-v9-1x1")


def test_a_solve_given_the_spec_answers_as_the_loose_arguments():
  g, outs = graphs.mlp()
  loose = autolayout.auto_layout(g, MESH, outs, graphs.TOPOLOGY,
                                 memory_budget=None, time_limit_s=30)
  spec = search_spec(g, topology=graphs.TOPOLOGY, mesh_shape=MESH,
                     memory_budget=None, time_limit_s=30)
  assert isinstance(spec, SearchSpec)
  typed = autolayout.auto_layout(g, outputs=outs, spec=spec)
  assert typed.rules == loose.rules
  assert typed.objective_value == loose.objective_value
  assert typed.mesh_shape == spec.mesh_shape
