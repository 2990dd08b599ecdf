"""LayoutSearch (the caller-owned state that replaced the module cache),
the free ``explain`` and LayoutResult as a frozen, hashable value."""

import dataclasses

import pytest

import autolayout
import mesh_tf as mtf
from tests.autolayout import graphs

MESH = "rows:2;cols:4"


def test_one_search_answers_every_query_like_fresh_calls():
  g, outs = graphs.mlp()
  search = autolayout.LayoutSearch(g, outs)
  assert search.outputs == tuple(outs)
  fresh = autolayout.auto_layout(g, MESH, outs, graphs.TOPOLOGY)
  mine = search.solve(MESH, graphs.TOPOLOGY)
  again = autolayout.auto_layout(g, MESH, outs, graphs.TOPOLOGY,
                                 search=search)
  assert mine.rules == fresh.rules == again.rules
  assert mine.objective_value == fresh.objective_value
  lean = search.solve(MESH, graphs.TOPOLOGY,
                      memory_budget=mine.peak_memory_bytes - 1)
  assert lean.peak_memory_bytes < mine.peak_memory_bytes
  peak, rules, _, status = search.min_peak(MESH, graphs.TOPOLOGY)
  assert status == "optimal" and peak <= lean.peak_memory_bytes
  front, _ = autolayout.pareto(g, MESH, outs, graphs.TOPOLOGY, search=search)
  assert front[0].rules == mine.rules and front[-1].peak_memory_bytes == peak


def test_a_query_keeps_its_constraints_to_itself():
  g, outs = graphs.mlp()
  search = autolayout.LayoutSearch(g, outs)
  best = search.solve(MESH, graphs.TOPOLOGY)
  dim, axis = best.rules.pairs[0]
  other = search.solve(MESH, graphs.TOPOLOGY, forbid=[(dim, axis)])
  assert (dim, axis) not in other.rules.pairs
  assert search.solve(MESH, graphs.TOPOLOGY).rules == best.rules


def test_a_search_of_a_graph_that_grew_is_refused():
  g, outs = graphs.mlp()
  search = autolayout.LayoutSearch(g, outs)
  search.solve(MESH, graphs.TOPOLOGY)
  n = len(g.operations)
  mtf.exp(outs[0])
  with pytest.raises(autolayout.AutoLayoutError, match=(
      f"grew from {n} to {n + 1} ops after its LayoutSearch was made")):
    search.solve(MESH, graphs.TOPOLOGY)


def test_auto_layout_refuses_a_search_of_another_graph():
  g, outs = graphs.mlp()
  h, _ = graphs.mlp()
  with pytest.raises(autolayout.AutoLayoutError, match="another graph"):
    autolayout.auto_layout(h, MESH, None, graphs.TOPOLOGY,
                           search=autolayout.LayoutSearch(g, outs))


def test_auto_layout_refuses_outputs_its_search_was_not_made_for():
  g, outs = graphs.mlp()
  search = autolayout.LayoutSearch(g, outs)
  assert autolayout.auto_layout(g, MESH, None, graphs.TOPOLOGY,
                                search=search).rules == search.solve(
                                    MESH, graphs.TOPOLOGY).rules
  other = [t for t in g.tensors if t is not outs[0]][-1]
  with pytest.raises(autolayout.AutoLayoutError,
                     match="outputs that differ from its LayoutSearch's"):
    autolayout.auto_layout(g, MESH, [other], graphs.TOPOLOGY, search=search)


def test_explain_a_hand_written_layout_without_solving_it():
  g, outs = graphs.mlp()
  table = autolayout.explain(autolayout.LayoutSearch(g, outs), MESH,
                             "batch:rows;d_ff:cols", graphs.TOPOLOGY)
  assert list(table["dim"]) == ["batch", "d_ff"]
  assert list(table["axis"]) == ["rows", "cols"]
  assert (table["runner_up_axis"] != table["axis"]).all()
  # A graph works too (a search with the default outputs).
  assert list(autolayout.explain(g, MESH, "batch:rows",
                                 graphs.TOPOLOGY)["dim"]) == ["batch"]


def test_layout_result_is_a_frozen_hashable_value():
  g, outs = graphs.mlp()
  r = autolayout.auto_layout(g, MESH, outs, graphs.TOPOLOGY)
  assert hash(r) == hash(dataclasses.replace(r))
  assert r == dataclasses.replace(r) and {r: 1}[r] == 1
  with pytest.raises(dataclasses.FrozenInstanceError):
    r.status = "feasible"
  assert hash(r.model_size) and r.model_size["tables"] == r.model_size.tables
  assert r.model_size.as_dict()["variables"] == r.model_size.variables
  with pytest.raises(KeyError):
    r.model_size["nope"]
