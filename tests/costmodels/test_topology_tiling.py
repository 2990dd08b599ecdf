"""The cost model's mesh mapping and the tilings of mesh_tf.core.tiling agree."""

import doctest

import pytest

import mesh_tf as mtf
from costmodels.errors import TopologyError
from costmodels.topology import map_mesh
from costmodels.topology import tiling as topo_tiling
from costmodels.topology.tiling import map_coordinates, tiling_of
from mesh_tf.core.tiling import (HierarchicalTiling, auto_logical_to_physical_tpu,
                            group_members)

ROW_MAJOR = [
    ("tpu-v4-4x4x4", "data:16;model:4"), ("tpu-v4-4x4x4", "a:4;b:4;c:4"),
    ("tpu-v4-4x4x4", "data:2;model:32"), ("tpu-v4-4x4x8", "x:2;y:64"),
    ("tpu-v5e-16x16", "data:16;model:16"), ("tpu-v5e-16x16", "data:32;model:8"),
    ("tpu-v5e-16x16", "d:256"), ("tpu-v5p-2x2x2", "a:2;b:4"),
    ("h100x8-nodes2", "data:4;model:4"), ("dgx-h100", "m:8"),
]


@pytest.mark.parametrize("topology,mesh", ROW_MAJOR)
def test_the_row_major_tiling_prices_as_map_mesh(topology, mesh):
  mapping = map_mesh(topology, mesh)
  t = tiling_of(mapping)
  # map_mesh puts logical processor p on chip p.  The tiling splits the
  # chips into the same groups along every axis; only the order inside a
  # box over two physical dims differs (a ring, not row-major), so it is
  # the identity exactly when each axis lies on one physical dim.
  n = mapping.topology.num_chips
  sizes = mapping.mesh_shape.to_integer_list
  for axis in range(len(sizes)):
    groups = [group_members(sizes, axis, p) for p in range(n)]
    assert ({frozenset(t.logical_to_physical[q] for q in g) for g in groups}
            == {frozenset(g) for g in groups})
  one_dim_each = all(len(a.segments) <= 1 for a in mapping.axes)
  assert (t.logical_to_physical == list(range(n))) == one_dim_each
  # Pricing the tiling's coordinates gives the same links, structures and
  # bandwidths.
  again = map_coordinates(topology, mesh, t.physical_coordinates)
  assert again.axes == mapping.axes
  assert topo_tiling.row_major_agrees(topology, mesh)


def _auto_v5e(logical):
  coords = auto_logical_to_physical_tpu(logical, [16, 16, 1], True,
                                        logical_cores_per_chip=1)
  return [c[:2] for c in coords]  # drop the core coordinate (one per chip)


def _links(mapping):
  return [(a.axis, a.size, a.link_kind, a.structure, a.bandwidth_bytes_per_s)
          for a in mapping.axes]


@pytest.mark.parametrize("mesh,logical", [("data:16;model:16", [16, 16]),
                                          ("d:256", [256])])
def test_auto_tpu_tiling_on_v5e_agrees_with_map_mesh(mesh, logical):
  # The TPU heuristic and the row-major mapping pick other physical dims
  # (auto gives the last axis a column, row-major the minor dim) but the
  # same links: each axis is a whole wraparound ring of ICI.
  auto = map_coordinates("tpu-v5e-16x16", mesh, _auto_v5e(logical))
  assert _links(auto) == _links(map_mesh("tpu-v5e-16x16", mesh))


def test_auto_tpu_tiling_where_it_differs_from_row_major():
  # data:32;model:8 on 16x16: row-major lays model on 8 chips of one row (a
  # line) and data over the rest of that row (stride 8) times the columns.
  # The TPU heuristic makes model a compact 2x4 tile and data a ring of
  # tiles, which the cost model prices at twice the data bandwidth.
  row = map_mesh("tpu-v5e-16x16", "data:32;model:8")
  auto = map_coordinates("tpu-v5e-16x16", "data:32;model:8",
                         _auto_v5e([32, 8]))
  assert [s.size for s in row["model"].segments] == [8]
  assert sorted(s.size for s in auto["model"].segments) == [2, 4]
  assert auto["model"].bandwidth_bytes_per_s == row[
      "model"].bandwidth_bytes_per_s
  assert auto["data"].bandwidth_bytes_per_s == 2 * row[
      "data"].bandwidth_bytes_per_s


def test_a_hierarchical_tiling_on_v4_prices_its_boxes():
  # model over a 2x2 box of the last two dims, data over the rest.
  t = HierarchicalTiling([("data", None), ("model", [1, 2, 2])], [4, 4, 4])
  mapping = map_coordinates("tpu-v4-4x4x4", t.mesh_shape,
                            t.physical_coordinates)
  assert [(s.phys_dim, s.size, s.stride, s.structure)
          for s in mapping["model"].segments] == [("z", 2, 1, "line"),
                                                  ("y", 2, 1, "line")]
  assert [(s.phys_dim, s.size, s.stride, s.structure)
          for s in mapping["data"].segments] == [("z", 2, 2, "ring"),
                                                 ("y", 2, 2, "ring"),
                                                 ("x", 4, 1, "ring")]


def test_map_coordinates_errors():
  coords = tiling_of(map_mesh("tpu-v5p-2x2x2", "a:8")).physical_coordinates
  with pytest.raises(TopologyError, match="give one per chip"):
    map_coordinates("tpu-v5p-2x2x2", "a:8", coords[:4])
  with pytest.raises(TopologyError, match="distinct 3-tuples"):
    map_coordinates("tpu-v5p-2x2x2", "a:8", [coords[0]] * 8)
  # Swapping two chips breaks the boxes of axis b.
  swapped = list(coords)
  swapped[1], swapped[6] = swapped[6], swapped[1]
  with pytest.raises(TopologyError, match="mesh axis 'b'"):
    map_coordinates("tpu-v5p-2x2x2", "a:2;b:4", swapped)


def test_doctests():
  result = doctest.testmod(topo_tiling)
  assert result.failed == 0 and result.attempted > 0
  assert isinstance(tiling_of(map_mesh("dgx-h100", "m:8")).mesh_shape,
                    mtf.Shape)
