"""The networkx view of named dims."""

import networkx as nx

import mesh_tf as mtf
from autolayout.search import view


def _graph(layers=2):
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  b, d, f, odd = (mtf.Dimension("batch", 8), mtf.Dimension("d_model", 16),
                  mtf.Dimension("d_ff", 32), mtf.Dimension("odd", 6))
  x = mtf.get_variable(mesh, "x", mtf.Shape([b, d]), trainable=False)
  for i in range(layers):
    w1 = mtf.get_variable(mesh, f"w1_{i}", mtf.Shape([d, f]))
    w2 = mtf.get_variable(mesh, f"w2_{i}", mtf.Shape([f, d]))
    x = x + mtf.einsum([mtf.relu(mtf.einsum([x, w1], reduced_dims=[d])), w2],
                       reduced_dims=[f])
  y = mtf.reduce_sum(x * mtf.zeros(mesh, mtf.Shape([odd])) + x,
                     output_shape=mtf.Shape([odd]))
  return g, y


def test_nodes_and_edges_name_ops_tensors_and_dims():
  g, _ = _graph(1)
  v = view.build_view(g)
  dims = sorted(n[1] for n, k in v.nodes(data="kind") if k == "dim")
  assert dims == ["batch", "d_ff", "d_model", "odd"]
  ein = [n for n, t in v.nodes(data="op_type") if t == "EinsumOperation"][0]
  assert view.dims_of(v, ein) == ("batch", "d_ff", "d_model")
  assert v.nodes[("dim", "d_ff")]["size"] == 32
  out = list(v.successors(ein))
  assert any(n[0] == "tensor" for n in out)


def test_splittable_dims_need_divisibility():
  g, _ = _graph(1)
  s = view.splittable_dims(g, "rows:2;cols:4")
  assert s["batch"] == ("rows", "cols")
  assert s["odd"] == ("rows",)        # 6 is not divisible by cols=4
  assert view.splittable_dims(g, "one:1;x:3")["odd"] == ("x",)
  assert view.splittable_dims(g, "one:1;x:3")["batch"] == ()


def test_dims_used_together_and_repeated_layers():
  g, _ = _graph(3)
  groups = view.dims_used_together(g)
  assert ("odd",) in groups and all(len(grp) == 1 for grp in groups)
  reps = view.repeated_ops(g)
  # The three identical layers: each of their ops repeats 3 times.
  assert max(len(r) for r in reps) >= 3
  einsums = [r for r in reps if r[0].startswith("einsum")]
  assert sorted(len(r) for r in einsums) == [3, 3]
  assert view.dim_sets(g)[("batch", "d_ff", "d_model")] == 6


def test_graphml_round_trip_and_dot(tmp_path):
  g, _ = _graph(1)
  v = view.build_view(g)
  path = tmp_path / "g.graphml"
  view.write_graphml(v, path)
  back = nx.read_graphml(path)
  assert back.number_of_nodes() == v.number_of_nodes()
  assert back.number_of_edges() == v.number_of_edges()
  assert back.nodes["dim:d_ff"]["size"] == 32
  dot = view.to_dot(v)
  assert dot.startswith("digraph mtf {") and '"dim:d_ff" [label="d_ff=32"' in dot
  view.write_dot(v, tmp_path / "g.dot")
  assert (tmp_path / "g.dot").read_text() == dot


def test_dims_that_always_share_tensors_form_a_group():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  b, d, h, k = (mtf.Dimension("b", 4), mtf.Dimension("d", 8),
                mtf.Dimension("h", 2), mtf.Dimension("k", 4))
  x = mtf.get_variable(mesh, "x", mtf.Shape([b, d]))
  w = mtf.get_variable(mesh, "w", mtf.Shape([d, h, k]))
  q = mtf.einsum([x, w], reduced_dims=[d])           # [b, h, k]
  mtf.reduce_sum(mtf.exp(q), output_shape=mtf.Shape([b]))
  groups = view.dims_used_together(g)
  assert groups[0] == ("h", "k")
  assert sorted(groups[1:]) == [("b",), ("d",)]
