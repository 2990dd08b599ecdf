"""TPU pods joined by the data-centre network (PaLM's two v4 pods)."""

import pytest

import costmodels
from costmodels.topology import presets


def test_two_v4_pods_have_a_dcn_pod_dim_over_ici_tori():
  t = costmodels.get_topology("tpu-v4-2pods-16x16x12")
  assert t.num_chips == 6144
  assert [d.name for d in t.dims] == ["pod", "x", "y", "z"]
  assert t.dims[0].link.kind == "dcn"
  assert t.dims[0].link.bandwidth_bytes_per_s == pytest.approx(3.296e9,
                                                               rel=1e-3)
  assert all(d.link.kind == "ici" and d.wraparound for d in t.dims[1:])
  # PaLM's layout: 12-way model parallel inside a pod, data over the rest.
  m = costmodels.map_mesh(t, "data:512;model:12")
  assert m["data"].spans_nodes is False
  assert presets.tpu_pods("v4", 2, (16, 16, 12)).dims == t.dims


def test_unknown_pod_family_names_the_form():
  with pytest.raises(costmodels.TopologyError, match="2pods"):
    costmodels.get_topology("tpu-v4-2pod-16x16x12")
