"""The compressed memory steps (autolayout.search.memory_steps): exact against the
cost model's liveness under every layout of tiny literal graphs, and, as the
program's constraint 5, feasible at the smallest peak and infeasible one
byte below it (real CP-SAT)."""

import pytest
from ortools.sat.python import cp_model

import mesh_tf as mtf
from costmodels import memory as cm_memory
from autolayout.search import assignments, formulation, memory_steps
from autolayout.errors import InfeasibleLayoutError
from autolayout.search.solve import LayoutSearch
from tests.autolayout import graphs


def _chain():
  """x[b=8, d=16] -> exp -> exp -> sum: one tensor of (b, d) dies per step."""
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.get_variable(mesh, "x", "b:8,d:16", trainable=False)
  y = mtf.exp(mtf.exp(x))
  return g, [mtf.reduce_sum(y)]


def _einsum_copies():
  """A product whose kernel copies its second operand (costmodels.kernel_copies)."""
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  q = mtf.get_variable(mesh, "q", "b:4,l:8,k:4", trainable=False)
  k = mtf.get_variable(mesh, "k", "m:8,b:4,k:4", trainable=False)
  s = mtf.einsum([mtf.exp(q), mtf.exp(k)], output_shape="b:4,l:8,m:8")
  return g, [mtf.reduce_sum(s)]


def _conv_copies():
  """A padded 2-D convolution: its kernel copies the padded,
  halo-extended input (costmodels.kernel_copies)."""
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.get_variable(mesh, "x", "b:4,rows:8,cols:8,c:2", trainable=False)
  w = mtf.get_variable(mesh, "w", "fr:3,fc:3,c:2,f:2", trainable=False)
  y = mtf.conv2d(mtf.exp(x), w, padding="SAME")
  return g, [mtf.reduce_sum(y)]


def _peak_from_steps(ms, space, rules):
  """Peak bytes per device of ``rules`` over the kept steps."""
  coeffs = memory_steps.step_coefficients(ms, space)
  return max(sum(per[assignments.from_rules(scope, rules)]
                 for scope, per in step.items()) for step in coeffs)


def test_compress_merges_equal_steps_and_drops_dominated_ones():
  g, outs = _chain()
  ms = memory_steps.compress(g, outs)
  sched = cm_memory.schedule(g, outs)
  assert ms.total_steps == len(sched)
  assert 1 <= len(ms.steps) < ms.total_steps
  assert ms.bytes.shape == (len(ms.steps), len(ms.scopes))
  # No kept step is <= another everywhere.
  for i in range(len(ms.steps)):
    for j in range(len(ms.steps)):
      if i != j:
        assert not (ms.bytes[i] <= ms.bytes[j]).all()


@pytest.mark.parametrize("make", [_chain, graphs.mlp, graphs.merged_sums,
                                  _einsum_copies, _conv_copies])
@pytest.mark.parametrize("mesh", ["rows:2;cols:4", "x:2;y:2;z:2"])
def test_kept_steps_give_the_cost_models_peak_under_every_layout(make, mesh):
  g, outs = make()
  space = assignments.dim_space(g, mesh)
  ms = memory_steps.compress(g, outs)
  pruned = memory_steps.prune_by_layouts(ms, space)
  assert len(pruned.steps) <= len(ms.steps)
  for rules in assignments.all_layouts(g, mesh):
    want = cm_memory.memory_profile(g, mesh, rules, outputs=outs).peak_bytes
    assert _peak_from_steps(ms, space, rules) == want, str(rules)
    assert _peak_from_steps(pruned, space, rules) == want, str(rules)


def test_prune_leaves_steps_alone_past_its_layout_limit():
  g, outs = graphs.mlp()
  space = assignments.dim_space(g, "rows:2;cols:4")
  ms = memory_steps.compress(g, outs)
  assert memory_steps.prune_by_layouts(ms, space, max_layouts=1) is ms


def test_step_coefficients_divide_by_the_split_axes():
  g, outs = _chain()
  space = assignments.dim_space(g, "x:2;y:4")
  ms = memory_steps.compress(g, outs)
  (step, *_) = memory_steps.step_coefficients(ms, space)
  per = step[("b", "d")]
  whole = per[(None, None)]
  assert per[("x", None)] == whole // 2 and per[(None, "y")] == whole // 4
  assert per[("y", "x")] == whole // 8


@pytest.mark.parametrize("slack,expected", [(0, "OPTIMAL"),
                                            (-1, "INFEASIBLE")])
def test_memory_constraint_is_tight_at_the_smallest_peak(slack, expected):
  g, outs = graphs.mlp()
  mesh = "rows:2;cols:4"
  floor = min(cm_memory.memory_profile(g, mesh, r, outputs=outs).peak_bytes
              for r in assignments.all_layouts(g, mesh))
  problem = LayoutSearch(g, outs).problem(mesh, graphs.TOPOLOGY,
                                          memory_budget=floor + slack)
  solver = cp_model.CpSolver()
  solver.parameters.num_workers = 1
  solver.parameters.max_time_in_seconds = 10.0
  status = solver.solve(problem.form.model)
  assert solver.status_name(status) == expected
  if expected == "OPTIMAL":
    x = {k: solver.value(var) for k, var in problem.form.vars.x.items()}
    rules = mtf.LayoutRules([(k.dim, k.axis) for k, val in sorted(x.items())
                             if val])
    assert cm_memory.memory_profile(g, mesh, rules,
                                    outputs=outs).peak_bytes <= floor
  assert isinstance(problem.form, formulation.Formulation)


def _blocks(space, layouts):
  return sorted(tuple(1 if o is None else space.axis_size(o) for o in lay)
                for lay in layouts)


@pytest.mark.parametrize("make", [graphs.mlp, graphs.merged_sums,
                                  lambda: graphs.training_mlp(stage=3)])
@pytest.mark.parametrize("mesh,axes", [("rows:2;cols:4", 1),
                                       ("x:2;y:2;z:2", 1),
                                       ("x:2;y:2;z:2", 2)])
def test_layout_blocks_are_the_valid_global_layouts(make, mesh, axes):
  g, _ = make()
  space = assignments.dim_space(g, mesh, axes)
  layouts = assignments.local_assignments(space, space.dims)
  blocks = memory_steps.layout_blocks(space, len(layouts))
  assert blocks.shape == (len(layouts), len(space.dims))
  assert sorted(map(tuple, blocks.tolist())) == _blocks(space, layouts)
  assert memory_steps.layout_blocks(space, len(layouts) - 1) is None


@pytest.mark.parametrize("make", [_chain, graphs.mlp, graphs.merged_sums,
                                  lambda: graphs.training_mlp(stage=3)])
@pytest.mark.parametrize("mesh", ["rows:2;cols:4", "x:2;y:2;z:2"])
def test_least_peak_is_the_smallest_peak_of_any_layout(make, mesh):
  g, outs = make()
  space = assignments.dim_space(g, mesh)
  ms = memory_steps.compress(g, outs)
  pruned = memory_steps.prune_by_layouts(ms, space)
  assert pruned.least_peak == min(
      _peak_from_steps(ms, space, rules)
      for rules in assignments.all_layouts(g, mesh))
  assert ms.least_peak is None
  assert memory_steps.prune_by_layouts(ms, space, max_layouts=1) is ms


@pytest.mark.parametrize("make", [graphs.mlp,
                                  lambda: graphs.training_mlp(stage=3)])
def test_may_fit_false_only_when_the_program_is_infeasible(make):
  """The screen is a relaxation of the program: where it proves no layout
  fits, CP-SAT finds the program infeasible, and at the program's own
  smallest peak it lets the program decide."""
  g, outs = make()
  mesh, topo = "rows:2;cols:4", graphs.TOPOLOGY
  search = LayoutSearch(g, outs)
  peak, _, _, status = search.min_peak(mesh, topo)
  assert status == "optimal"
  assert search.may_fit(mesh, topo, peak)
  assert search.may_fit(mesh, topo, None)
  assert not search.may_fit(mesh, topo, peak - 1)
  with pytest.raises(InfeasibleLayoutError):
    search.solve(mesh, topo, memory_budget=peak - 1)
