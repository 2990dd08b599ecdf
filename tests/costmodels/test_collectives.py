"""Collective cost formulas against hand-computed cases."""

import math

import pytest

import costmodels as cm
from costmodels.collectives import LinkParams, phase_times
from costmodels.hardware import LinkSpec
from mesh_tf import CollectiveRecord, MtfError

# Round numbers so that every expected value below is computed by hand.
LINK = LinkSpec("test-ici", "ici", 100.0, 1.0)          # 100 B/s, 1 s/step
NVL = LinkSpec("test-nvlink", "nvlink", 100.0, 1.0)
IB = LinkSpec("test-ib", "infiniband", 10.0, 5.0)


def test_ring_line_switch_single_dimension():
  # all-reduce, p=4, n=800: 2*3*alpha + 2*(3/4)*800/b_alg.
  assert cm.allreduce_time(800, 4, 100.0, 1.0, "ring") == 6 + 6    # b_alg 200
  assert cm.allreduce_time(800, 4, 100.0, 1.0, "line") == 6 + 12   # b_alg 100
  assert cm.allreduce_time(800, 4, 100.0, 1.0, "switch") == 6 + 12
  assert cm.reduce_scatter_time(800, 4, 100.0, 1.0, "ring") == 3 + 3
  # all-gather of 100 bytes per device: 3*alpha + 3*100/b_alg.
  assert cm.allgather_time(100, 4, 100.0, 1.0, "ring") == 3 + 1.5
  assert cm.allgather_time(100, 4, 100.0, 1.0, "switch") == 3 + 3
  # all-to-all, p=4, n=400: switch 3/4*400/100; ring: S = 1+2+1 = 4,
  # 400*4/(2*4*100) = 2; line: 400/4 * 2*2 / 100 = 4.
  assert cm.alltoall_time(400, 4, 100.0, 1.0, "switch") == 3 + 3
  assert cm.alltoall_time(400, 4, 100.0, 1.0, "ring") == 3 + 2
  assert cm.alltoall_time(400, 4, 100.0, 1.0, "line") == 3 + 4
  # Shift by one: alpha + n/B; by 3 on a ring of 8: 3 messages per link.
  assert cm.permute_time(100, 8, 100.0, 1.0, "ring") == 2
  assert cm.permute_time(100, 8, 100.0, 1.0, "ring", offset=3) == 4
  assert cm.permute_time(100, 8, 100.0, 1.0, "ring", offset=7) == 2
  assert cm.permute_time(100, 8, 100.0, 1.0, "switch", offset=3) == 2
  for f in (cm.allreduce_time, cm.allgather_time, cm.alltoall_time,
            cm.permute_time, cm.reduce_scatter_time):
    assert f(10**9, 1, 1.0, 1.0, "ring") == 0.0


def test_unknown_structure_and_kind_raise():
  with pytest.raises(MtfError, match="unknown link structure 'mesh'"):
    cm.allreduce_time(8, 2, 1.0, 0.0, "mesh")
  with pytest.raises(MtfError, match="unknown collective kind 'gather'"):
    cm.time_on_links("gather", 8, [LinkParams(2, 1.0, 0.0)])


def test_2d_torus_dimension_ordered_allreduce():
  topo = cm.torus("tpu-v4", (4, 4), wraparound=True, link=LINK)
  m = cm.map_mesh(topo, "x:4;y:4")
  assert m["x"].structure == m["y"].structure == "ring"
  # Over one axis: a ring of 4 at b_alg = 200.
  assert cm.collective_time(("allreduce", ("y",), 4, 800, "SUM"), m) == 12
  # Over both: reduce-scatter y on 800 B (3 + 3/4*800/200 = 6), then x on
  # the 200 B left (3 + 3/4*200/200 = 3.75), then all-gather back: 2*9.75.
  t = cm.collective_time(("allreduce", ("x", "y"), 16, 800, "SUM"), m)
  assert t == 19.5
  assert cm.torus_allreduce_time(800, m.link_params(("x", "y"))) == 19.5
  # A single mesh axis covering the whole torus costs the same.
  m16 = cm.map_mesh(topo, "a:16")
  assert m16["a"].structure == "torus"
  assert cm.collective_time(("allreduce", ("a",), 16, 800), m16) == 19.5
  # All-gather of 50 B per device = reduce-scatter of 800 B: 9.75.
  assert cm.collective_time(("allconcat", ("a",), 16, 50), m16) == 9.75
  # All-to-all by dimension: each ring of 4 moves all 400 B: 2 * (3 + 2).
  assert cm.collective_time(("alltoall", ("a",), 16, 400), m16) == 10
  # Without wraparound the same torus is two lines: b_alg = 100.
  mesh2d = cm.map_mesh(cm.torus("tpu-v4", (4, 4), False, link=LINK), "x:4;y:4")
  assert mesh2d["y"].structure == "line"
  assert cm.collective_time(("allreduce", ("y",), 4, 800), mesh2d) == 18


def test_axes_sharing_one_physical_dim_share_links_and_merge():
  topo = cm.torus("tpu-v4", (4, 4), wraparound=True, link=LINK)
  m = cm.map_mesh(topo, "a:2;b:8")
  # b takes y (4) and the first half of x; a takes x's outer half, stride 2,
  # so its two concurrent groups share x's links: B = 100/2.
  assert [(s.phys_dim, s.size, s.stride) for s in m["b"].segments] == [
      ("y", 4, 1), ("x", 2, 1)]
  (seg,) = m["a"].segments
  assert (seg.phys_dim, seg.size, seg.stride, seg.structure) == (
      "x", 2, 2, "ring")
  assert seg.bandwidth_bytes_per_s == 50
  # All-reduce over a alone, p=2: 2*1 + 2*(1/2)*800/(2*50) = 10.
  assert cm.collective_time(("allreduce", ("a",), 2, 800), m) == 10
  # Over (a, b) the two halves of x merge into x's full ring: as a 4x4 torus.
  assert [l.size for l in m.link_params(("a", "b"))] == [4, 4]
  assert cm.collective_time(("allreduce", ("a", "b"), 16, 800), m) == 19.5
  by_axis = cm.collective_time_by_axis(("allreduce", ("a", "b"), 16, 800), m)
  # y's phases (2*6) belong to b; x's (2*3.75) are split evenly.
  assert by_axis == {"a": 3.75, "b": 12 + 3.75}


def test_two_node_gpu_cluster_pays_for_infiniband():
  topo = cm.gpu_cluster("h100", nodes=2, network=IB, intra_node=NVL)
  m = cm.map_mesh(topo, "data:16")
  assert m["data"].link_kind == "nvlink+infiniband"
  assert m["data"].structure == "hierarchical"
  assert m["data"].spans_nodes
  # NVLink first (faster): 7*1 + 7/8*1600/100 = 21; then IB on 200 B:
  # 1*5 + 1/2*200/10 = 15.  All-reduce: 2 * 36.
  assert cm.collective_time(("allreduce", ("data",), 16, 1600), m) == 72
  assert cm.collective_time(("allconcat", ("data",), 16, 100), m) == 36
  # All-to-all: NVLink phase 7 + 7/8*1600/100 = 21, IB 5 + 1/2*1600/10 = 85.
  assert cm.collective_time(("alltoall", ("data",), 16, 1600), m) == 106
  m2 = cm.map_mesh(topo, "node:2;gpu:8")
  assert m2["node"].link_kind == "infiniband"
  assert cm.collective_time(("allreduce", ("node",), 2, 1600), m2) == 170
  assert cm.collective_time(("allreduce", ("gpu",), 8, 1600), m2) == 42


def test_preset_cluster_numbers():
  m = cm.map_mesh("h100x8-nodes2", "data:2;model:8")
  # 1 GB all-reduce across the 2 nodes over NDR (50 GB/s, 5 us/step).
  t = cm.collective_time(("allreduce", ("data",), 2, 10**9, "SUM"), m)
  assert t == pytest.approx(2 * (5e-6 + 0.5 * 1e9 / 50e9), rel=1e-12)
  t = cm.collective_time(("allreduce", ("model",), 8, 10**9, "SUM"), m)
  assert t == pytest.approx(2 * (7e-6 + 7 / 8 * 1e9 / 450e9), rel=1e-12)


def test_collective_time_takes_records_and_checks_group_size():
  m = cm.map_mesh(cm.torus("tpu-v4", (4, 4), link=LINK), "x:4;y:4")
  rec = CollectiveRecord("op", "allreduce", ("y",), 4, 800, "SUM", "op")
  assert cm.collective_time(rec, m) == 12
  assert cm.collective_time(rec.key(), m) == 12
  assert cm.collective_time(("receive", ("y",), 4, 100), m) == 2
  with pytest.raises(MtfError, match=r"group size 8.*4 processors"):
    cm.collective_time(("allreduce", ("y",), 8, 800), m)


def test_phase_times_sum_to_the_total():
  links = [LinkParams(4, 100.0, 1.0, "ring", ("a",)),
           LinkParams(2, 10.0, 5.0, "switch", ("b",))]
  for kind in ("allreduce", "allconcat", "alltoall", "receive",
               "reduce_scatter"):
    total = cm.time_on_links(kind, 800, links)
    assert math.isclose(sum(t for _, t in phase_times(kind, 800, links)),
                        total)
    assert total > 0
