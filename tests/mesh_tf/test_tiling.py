"""Logical-to-physical tilings: bijection, boxes, rings, and the original's
answers."""

import doctest
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mesh_tf as mtf
from mesh_tf.core import tiling
from mesh_tf.core.tiling import (HierarchicalTiling, auto_logical_to_physical_tpu,
                            ring_order)


def _adjacent(a, b):
  return sum(abs(x - y) for x, y in zip(a, b)) == 1


@pytest.mark.parametrize("m,n", [(1, 1), (1, 5), (4, 1), (2, 2), (2, 3),
                                 (4, 4), (3, 4), (6, 2), (3, 3), (5, 7)])
def test_ring_order_visits_every_cell_through_neighbours(m, n):
  order = ring_order(m, n)
  assert sorted(order) == [(i, j) for i in range(m) for j in range(n)]
  assert all(_adjacent(a, b) for a, b in zip(order, order[1:]))
  closes = _adjacent(order[-1], order[0])
  # A cycle exists iff both sides > 1 and one is even (the grid is
  # bipartite); lines and odd x odd grids are paths.
  assert closes == (m > 1 and n > 1 and (m * n) % 2 == 0)


def test_ring_order_example_and_error():
  assert ring_order(2, 3) == [(0, 0), (0, 1), (0, 2), (1, 2), (1, 1), (1, 0)]
  with pytest.raises(mtf.MtfError, match="positive sides, got 0x3"):
    ring_order(0, 3)


# --- Answers of mesh_tensorflow 0.1.21 (simd_mesh_impl, run on TF 2.21 with
# benchmarks/mtf_port.py's shims), for cases where both walk the same way.
ORIGINAL = [
    (lambda: HierarchicalTiling([("a", [2, 1]), ("b", [2, 4])], [4, 4])
     .logical_to_physical,
     [0, 1, 2, 3, 7, 6, 5, 4, 8, 9, 10, 11, 15, 14, 13, 12]),
    (lambda: HierarchicalTiling([("a", None), ("b", [2, 2, 2])], [4, 4, 4])
     .logical_to_physical[:16],
     [0, 1, 4, 5, 20, 21, 16, 17, 2, 3, 6, 7, 22, 23, 18, 19]),
    (lambda: auto_logical_to_physical_tpu([4, 8], [4, 4, 2]),
     [0, 1, 8, 9, 16, 17, 24, 25, 2, 3, 10, 11, 18, 19, 26, 27, 4, 5, 12, 13,
      20, 21, 28, 29, 6, 7, 14, 15, 22, 23, 30, 31]),
    (lambda: auto_logical_to_physical_tpu([2, 16], [4, 4, 2]),
     [0, 1, 2, 3, 4, 5, 6, 7, 14, 15, 12, 13, 10, 11, 8, 9, 16, 17, 18, 19,
      20, 21, 22, 23, 30, 31, 28, 29, 26, 27, 24, 25]),
]


@pytest.mark.parametrize("make,want", ORIGINAL)
def test_matches_mesh_tensorflow(make, want):
  assert make() == want


def test_where_the_walk_differs_from_the_original_it_still_rings():
  # The original walks a [1, 4, 4] box row-major (its first dim is 1); here
  # it is a ring over the last two dims.
  t = HierarchicalTiling([("a", [1, 4, 4]), ("b", [4, 1, 1])], [4, 4, 4])
  group = [t.physical_coordinates[i * 4] for i in range(16)]
  assert all(_adjacent(a, b) for a, b in zip(group, group[1:] + group[:1]))


# --- Properties of any HierarchicalTiling ---------------------------------
def _factorizations(n, parts):
  """All ordered ways of writing n as a product of ``parts`` factors."""
  if parts == 1:
    return [[n]]
  return [[d] + rest for d in range(1, n + 1) if n % d == 0
          for rest in _factorizations(n // d, parts - 1)]


@st.composite
def _specs(draw):
  physical = draw(st.lists(st.sampled_from([1, 2, 3, 4, 6, 8]), min_size=1,
                           max_size=3))
  axes = draw(st.integers(1, 3))
  per_dim = [draw(st.sampled_from(_factorizations(p, axes)))
             for p in physical]
  spec = [(f"a{i}", [per_dim[k][i] for k in range(len(physical))])
          for i in range(axes)]
  return spec, physical


def _axis_groups(t):
  """For each logical axis, its groups as lists of physical coordinates."""
  sizes = t.mesh_shape.to_integer_list
  n = math.prod(sizes)
  out = []
  for axis in range(len(sizes)):
    starts = {min(tiling.group_members(sizes, axis, p)) for p in range(n)}
    out.append([[t.physical_coordinates[q]
                 for q in tiling.group_members(sizes, axis, p)]
                for p in sorted(starts)])
  return out


@settings(max_examples=150, deadline=None)
@given(_specs())
def test_hierarchical_tiling_properties(case):
  spec, physical = case
  t = HierarchicalTiling(spec, physical)
  n = math.prod(physical)
  # A bijection between logical processors and chips.
  assert sorted(t.logical_to_physical) == list(range(n))
  assert len(set(t.physical_coordinates)) == n
  assert t.mesh_shape.size == n
  for (_, box), groups, layout in zip(spec, _axis_groups(t),
                                      t.sizes_and_strides):
    strides = [s for _, s in layout]
    first = groups[0]
    for group in groups:
      # Every group is a translate of the first: the same strided box.
      origin = [min(c[k] for c in group) for k in range(len(physical))]
      shifted = sorted(tuple(c[k] - origin[k] for k in range(len(physical)))
                       for c in group)
      assert shifted == sorted(
          tuple(c[k] - min(x[k] for x in first) for k in range(len(physical)))
          for c in first)
      extent = {k: sorted({c[k] for c in group}) for k in range(len(physical))}
      for k, values in extent.items():
        assert len(values) == box[k]
        assert values == list(range(values[0], values[0] + box[k] * strides[k],
                                    strides[k]))
      # Neighbours follow along the axis (in units of the box's strides)
      # when it spans at most two dims of size > 1.
      big = [k for k in range(len(physical)) if box[k] > 1]
      if len(big) <= 2:
        steps = list(zip(group, group[1:]))
        if len(big) == 2 and (box[big[0]] * box[big[1]]) % 2 == 0:
          steps.append((group[-1], group[0]))  # and it closes: a ring
        for a, b in steps:
          assert sum(abs(x - y) // strides[k]
                     for k, (x, y) in enumerate(zip(a, b))) == 1


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([(2, 2, 2), (4, 4, 2), (4, 8, 2), (8, 8, 2),
                        (16, 16, 1), (8, 8, 1)]),
       st.integers(0, 2 ** 20))
def test_auto_tpu_is_a_permutation(physical, seed):
  n = math.prod(physical)
  k = int(math.log2(n))
  # A random split of log2(n) bits into up to 3 logical axes.
  cuts = sorted({seed % (k + 1), (seed // 7) % (k + 1)})
  bits = [cuts[0], cuts[-1] - cuts[0], k - cuts[-1]]
  logical = [2 ** b for b in bits]
  cores = physical[2]
  got = auto_logical_to_physical_tpu(logical, list(physical),
                                     logical_cores_per_chip=cores)
  assert sorted(got) == list(range(n))
  coords = auto_logical_to_physical_tpu(logical, list(physical), True,
                                        logical_cores_per_chip=cores)
  assert [c[0] * physical[1] * cores + c[1] * cores + c[2]
          for c in coords] == got


def test_auto_tpu_one_axis_rings_the_chips_cores_fastest():
  coords = auto_logical_to_physical_tpu([8], [2, 2, 2], True)
  assert coords == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 1, 0),
                    (1, 1, 1), (1, 0, 0), (1, 0, 1)]
  assert auto_logical_to_physical_tpu([8], [2, 2, 2]) == [0, 1, 2, 3, 6, 7,
                                                          4, 5]


def test_auto_tpu_unhandled_shapes_get_the_identity():
  assert auto_logical_to_physical_tpu([6], [3, 2, 1],
                                      logical_cores_per_chip=1) == list(
                                          range(6))
  assert auto_logical_to_physical_tpu([4], [2, 1, 2],
                                      logical_cores_per_chip=1) == [0, 1, 2, 3]
  assert auto_logical_to_physical_tpu([4], [2, 2], True) == [(0, 0), (0, 1),
                                                             (1, 0), (1, 1)]


def test_auto_tpu_folds_a_4d_topology_and_reads_a_device_assignment():
  assert tiling.physical_shape_3d_from_topology_proto_4d([2, 4, 8, 1]) == [
      32, 2, 1]
  assert tiling.physical_shape_3d_from_topology_proto_4d(
      [2, 4, 8, 1], fold_xy=True) == [8, 8, 1]

  class Assignment:  # tf.tpu.experimental.DeviceAssignment's interface
    num_replicas = 4

    class topology:  # noqa: N801
      mesh_shape = [2, 2, 1, 1]

    @staticmethod
    def coordinates(replica, logical_core):
      del logical_core
      return [(1, 1, 0), (0, 1, 0), (1, 0, 0), (0, 0, 0)][replica]

  # Chips (row, col) map to replicas through x + y * 2.
  coords = auto_logical_to_physical_tpu([4], [2, 2, 1], True,
                                        logical_cores_per_chip=1)
  replicas = auto_logical_to_physical_tpu([4], [2, 2, 1],
                                          device_assignment=Assignment,
                                          logical_cores_per_chip=1)
  by_chip = {0: 3, 1: 2, 2: 1, 3: 0}
  assert replicas == [by_chip[r + c * 2] for r, c, _ in coords]


def test_spec_to_mesh_shape_and_values():
  spec = [("rows", None), ("cols", [2, 4])]
  assert HierarchicalTiling.spec_to_mesh_shape(spec, 32) == mtf.Shape(
      [mtf.Dimension("rows", 4), mtf.Dimension("cols", 8)])
  a = HierarchicalTiling(spec, [4, 8])
  assert a.mesh_shape == HierarchicalTiling.spec_to_mesh_shape(spec, 32)
  assert a == HierarchicalTiling([("rows", [2, 2]), ("cols", [2, 4])], [4, 8])
  assert hash(a) == hash(HierarchicalTiling(spec, [4, 8]))
  assert "rows=[2, 2]" in repr(a)
  with pytest.raises(AttributeError, match="immutable"):
    a.foo = 1


def test_tiling_errors_say_what_to_change():
  with pytest.raises(mtf.MtfError, match=r"multiplies to \[2, 4\] per "
                                         r"physical dim, not the physical "
                                         r"mesh \[4, 4\]"):
    HierarchicalTiling([("a", [1, 1]), ("b", [2, 4])], [4, 4])
  with pytest.raises(mtf.MtfError, match="has 1 sizes but the physical mesh"):
    HierarchicalTiling([("a", [4])], [2, 2])
  with pytest.raises(mtf.MtfError, match="do not divide the physical mesh"):
    HierarchicalTiling([("a", None), ("b", [3, 1])], [4, 4])
  with pytest.raises(mtf.MtfError, match="only the first spec entry"):
    HierarchicalTiling([("a", [4, 4]), ("b", None)], [4, 4])
  with pytest.raises(mtf.MtfError, match="has 8 processors, not 16"):
    HierarchicalTiling.spec_to_mesh_shape([("a", [2, 4])], 16)
  with pytest.raises(mtf.MtfError, match=r"logical mesh \[4, 4\] has 16 "
                                         "processors but the physical mesh"):
    auto_logical_to_physical_tpu([4, 4], [4, 4, 2])
  with pytest.raises(mtf.MtfError, match="4-d topology shape"):
    tiling.physical_shape_3d_from_topology_proto_4d([4, 4, 2])


def test_original_import_path_and_doctests():
  assert mtf.simd_mesh_impl.HierarchicalTiling is HierarchicalTiling
  assert (mtf.simd_mesh_impl.auto_logical_to_physical_tpu
          is auto_logical_to_physical_tpu)
  result = doctest.testmod(tiling)
  assert result.failed == 0 and result.attempted > 0
