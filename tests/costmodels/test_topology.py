"""Hardware data, topology presets, mesh mapping and its errors."""

import pickle

import pytest

import costmodels as cm
from mesh_tf import MtfError


def test_chip_table_has_units_and_plausible_numbers():
  for name in ("tpu-v3", "tpu-v4", "tpu-v5e", "tpu-v5p", "a100", "h100",
               "h200", "b200"):
    c = cm.CHIPS[name]
    assert 1e14 < c.peak_bf16_flops_per_s < 1e16
    assert 1e10 < c.hbm_bytes < 1e12 and isinstance(c.hbm_bytes, int)
    assert 5e11 < c.hbm_bandwidth_bytes_per_s < 1e13
    assert 1e10 < c.link.bandwidth_bytes_per_s < 1e12
  assert cm.CHIPS["h100"].link.bandwidth_bytes_per_s == 450e9
  assert cm.CHIPS["tpu-v5p"].ici_links_per_chip == 6
  assert [cm.INFINIBAND[k].bandwidth_bytes_per_s for k in ("hdr", "ndr",
                                                           "xdr")] == [
      25e9, 50e9, 100e9]
  assert cm.PCIE["gen5"].bandwidth_bytes_per_s == pytest.approx(63e9, 1e-2)
  assert cm.get_chip("v4") is cm.CHIPS["tpu-v4"]


def test_every_preset_loads_and_maps_its_physical_mesh():
  names = cm.list_topologies()
  for required in ("tpu-v4-4x4x4", "tpu-v5e-16x16", "tpu-v5p-8x8x16",
                   "dgx-h100", "h100x8-nodes4", "h200x8-nodes16"):
    assert required in names
  for name in names:
    t = cm.get_topology(name)
    assert t.name == name
    assert cm.get_topology(t) is t
    m = cm.map_mesh(t, f"all:{t.num_chips}")
    assert m["all"].size == t.num_chips
    assert pickle.loads(pickle.dumps(t)) == t
  assert cm.get_topology("tpu-v4-4x4x4").num_chips == 64
  assert cm.get_topology("tpu-v5p-8x8x16").num_chips == 1024
  assert cm.get_topology("h200x8-nodes16").num_chips == 128
  assert cm.get_topology("h100x8-nodes4-xdr").dims[0].link.name == (
      "infiniband-xdr")
  assert cm.get_topology("tpu-v4-4x4x4").dims[0].wraparound
  assert not cm.get_topology("tpu-v4-2x2x2").dims[0].wraparound


def test_unknown_topology_names_the_presets():
  with pytest.raises(cm.TopologyError, match=r"unknown topology 'tpu-v9-4x4'"
                     r".*tpu-v4-4x4x4"):
    cm.get_topology("tpu-v9-4x4")
  assert issubclass(cm.TopologyError, MtfError)


def test_mapping_on_a_3d_torus():
  m = cm.map_mesh("tpu-v4-4x4x4", "data:16;model:4")
  assert m["model"].link_kind == "ici" and m["model"].structure == "ring"
  assert [(s.phys_dim, s.size) for s in m["model"].segments] == [("z", 4)]
  assert m["data"].structure == "torus"
  assert [(s.phys_dim, s.size) for s in m["data"].segments] == [
      ("y", 4), ("x", 4)]
  # A wraparound ring: both directions, 2 x 45 GB/s.
  assert m["model"].bandwidth_bytes_per_s == 90e9
  assert m["model"].latency_s == cm.CHIPS["tpu-v4"].link.latency_s
  again = pickle.loads(pickle.dumps(m))
  assert again == m and again["data"] == m["data"]


def test_gpu_axis_inside_a_node_uses_nvlink_and_across_nodes_infiniband():
  m = cm.map_mesh("h200x8-nodes16", "data:16;model:8")
  assert (m["model"].link_kind, m["model"].structure) == ("nvlink", "switch")
  assert (m["data"].link_kind, m["data"].structure) == ("infiniband",
                                                         "switch")
  assert m["data"].bandwidth_bytes_per_s == 50e9
  assert m["model"].bandwidth_bytes_per_s == 450e9
  m = cm.map_mesh("h100x8-nodes4", "data:16;model:2")
  assert m["data"].link_kind == "nvlink+infiniband"
  assert m["data"].bandwidth_bytes_per_s == 50e9   # pays for the slow link
  pcie = cm.gpu_cluster("a100", nodes=1, intra_node="pcie-gen4")
  assert cm.map_mesh(pcie, "x:8")["x"].link_kind == "pcie"
  # Size-1 axes have no links.
  m = cm.map_mesh("dgx-h100", "one:1;x:8")
  assert (m["one"].link_kind, m["one"].segments) == ("none", ())


def test_mesh_of_the_wrong_size_says_what_fits():
  with pytest.raises(cm.TopologyError,
                     match=r"mesh Shape\[data=16, model=8\] has 128 processors"
                     r" but topology 'tpu-v4-4x4x4' has 64 chips .*multiply "
                     r"to 64, e\.g\. 'x:4;y:4;z:4' or 'data:16;model:4'"):
    cm.map_mesh("tpu-v4-4x4x4", "data:16;model:8")


def test_mesh_axis_that_cannot_be_embedded_says_what_fits():
  with pytest.raises(cm.TopologyError,
                     match=r"mesh axis b=12 of mesh Shape\[a=2, b=12\] cannot "
                     r"be embedded in topology 'h100x8-nodes3'.*physical dim "
                     r"gpu=8 8 chips remain.*e\.g\. 'node:3;gpu:8' or "
                     r"'a:3;b:8'"):
    cm.map_mesh("h100x8-nodes3", "a:2;b:12")
  with pytest.raises(cm.TopologyError, match=r"mesh axis b=8 .*'tpu-v4-4x6'"):
    cm.map_mesh(cm.torus("tpu-v4", (4, 6)), "a:3;b:8")
  with pytest.raises(cm.TopologyError, match="mesh axis 'c' is not in mesh"):
    cm.map_mesh("dgx-h100", "a:2;b:4")["c"]


def test_user_defined_topologies():
  t = cm.tpu_slice("v5p", (4, 4, 8), name="my-slice")
  assert t.name == "my-slice" and t.num_chips == 128
  t = cm.gpu_cluster("b200", nodes=2, network="xdr")
  assert t.name == "b200x8-nodes2" and t.dims[0].link.name == "infiniband-xdr"
  with pytest.raises(cm.TopologyError, match="tpu_slice needs a TPU chip"):
    cm.tpu_slice("h100", (2, 2))
  with pytest.raises(cm.TopologyError, match="unknown network 'qdr'"):
    cm.gpu_cluster("h100", nodes=2, network="qdr")
  with pytest.raises(cm.TopologyError, match="unknown chip 'tpu-v9'"):
    cm.get_chip("tpu-v9")
