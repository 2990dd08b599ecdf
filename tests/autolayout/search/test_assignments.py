"""The valid local assignments (autolayout.search.assignments), on tiny literal
graphs: which axes a dim may take, which dims conflict, and that every
global layout it lists is one the cost model accepts, and vice versa."""

import pytest

import mesh_tf as mtf
from autolayout.search import assignments
from autolayout.errors import AutoLayoutError
from tests.autolayout import graphs


def _two_tensors():
  """x[a=4, b=6] and y[c=5]: a and b share a tensor, c is alone."""
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.get_variable(mesh, "x", "a:4,b:6")
  y = mtf.get_variable(mesh, "y", "c:5")
  mtf.reduce_sum(x), mtf.reduce_sum(y)
  return g


def test_dim_space_options_follow_divisibility_and_skip_size_one_axes():
  space = assignments.dim_space(_two_tensors(), "x:2;y:3;one:1")
  assert space.dims == ("a", "b", "c")
  assert space.axes == ("x", "y")
  assert space.sizes == {"a": 4, "b": 6, "c": 5}
  assert space.options == {"a": ("x",), "b": ("x", "y"), "c": ()}
  assert frozenset(("a", "b")) in space.conflicts
  assert frozenset(("a", "c")) not in space.conflicts
  assert space.axis_size("y") == 3


def test_dim_space_takes_one_name_with_two_sizes_on_axes_dividing_both():
  # (Before pad/slice/halo graphs were priced, this was refused.)
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  mtf.get_variable(mesh, "p", "a:4")
  mtf.get_variable(mesh, "q", "a:6")
  space = assignments.dim_space(g, "x:2;y:4")
  assert space.all_sizes["a"] == (4, 6)
  assert space.options["a"] == ("x",)  # 4 does not divide 6


def test_local_assignments_feasible_and_conflicting_pairs():
  space = assignments.dim_space(_two_tensors(), "x:2;y:3")
  got = assignments.local_assignments(space, ("a", "b"))
  # Replicated first; a and b share x never (they share tensor x).
  assert got[0] == (None, None)
  assert set(got) == {(None, None), (None, "x"), (None, "y"), ("x", None),
                      ("x", "y")}
  assert ("x", "x") not in got


def test_local_assignments_of_non_conflicting_dims_may_share_an_axis():
  space = assignments.dim_space(_two_tensors(), "x:2;y:2")
  # a and c never share a tensor: both on x is valid (c=5 only replicates).
  assert assignments.local_assignments(space, ("a", "c")) == [
      (None, None), ("x", None), ("y", None)]
  space = space._replace(sizes={**space.sizes, "c": 4},
                         options={**space.options, "c": ("x", "y")})
  assert ("x", "x") in assignments.local_assignments(space, ("a", "c"))


def test_unsplittable_dim_only_replicates():
  space = assignments.dim_space(_two_tensors(), "x:2")
  # As dim_space builds it when an op marks b unsplittable: no options.
  space = space._replace(options={**space.options, "b": ()},
                         unsplittable=frozenset({"b"}))
  assert assignments.local_assignments(space, ("b",)) == [(None,)]
  assert assignments.local_assignments(space, ("a", "b")) == [
      (None, None), ("x", None)]


def test_too_many_local_assignments_is_a_typed_error(monkeypatch):
  space = assignments.dim_space(_two_tensors(), "x:2;y:3")
  monkeypatch.setattr(assignments, "MAX_LOCAL_ASSIGNMENTS", 3)
  with pytest.raises(AutoLayoutError, match=r"dims \['a', 'b'\] .* more "
                     "than 3; mark some of them unsplittable"):
    assignments.local_assignments(space, ("a", "b"))


def test_rules_round_trip_and_restrict():
  scope = ("a", "b", "c")
  sigma = ("x", None, "y")
  rules = assignments.to_rules(scope, sigma)
  assert str(rules) == "a:x;c:y"
  assert assignments.from_rules(scope, rules) == sigma
  assert assignments.restrict(scope, sigma, ("c", "a")) == ("y", "x")


@pytest.mark.parametrize("mesh", ["rows:2;cols:4", "x:2;y:2;z:2"])
def test_all_layouts_are_exactly_those_the_cost_model_accepts(mesh):
  g, outs = graphs.mlp(batch=8, d_model=16, d_ff=32)
  mine = {str(r) for r in assignments.all_layouts(g, mesh)}
  accepted = {rules for _, rules, _ in graphs.brute_force(g, mesh, outs)}
  assert mine == accepted


def test_local_assignments_are_the_product_without_clashes_in_its_order():
  # The pruned enumeration gives exactly the clash-free assignments of the
  # plain product, in the product's order, single and multi-axis options.
  import itertools  # pylint: disable=g-import-not-at-top
  dims = ("a", "b", "c", "d")
  options = {"a": ("x", "y", ("x", "y")), "b": ("x",), "c": ("y", "x"),
             "d": ("x", "y", ("x", "y"))}
  for conflicts in ({("a", "b"), ("b", "c"), ("a", "d")},
                    set(itertools.combinations(dims, 2)), set()):
    space = assignments.DimSpace(
        None, {d: 8 for d in dims}, options,
        frozenset(frozenset(p) for p in conflicts), frozenset())
    for scope in (dims, ("d", "b", "a"), ("c",), ()):
      want = [
          combo for combo in itertools.product(
              *[(None,) + options[d] for d in scope])
          if not any(
              frozenset((scope[i], scope[j])) in space.conflicts
              and set(assignments.option_axes(combo[i]))
              & set(assignments.option_axes(combo[j]))
              for i, j in itertools.combinations(range(len(scope)), 2))]
      assert assignments.local_assignments(space, scope) == want
