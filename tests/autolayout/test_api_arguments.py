"""Every misuse of the public entry points (``mtf.auto_layout``,
``mtf.auto_mesh_and_layout``, ``autolayout.pareto``,
``costmodels.evaluate``) raises an ``MtfError`` subclass that names the
argument and a valid value; the API takes the CLI's size strings, and its
defaults are the CLI's."""

import math

import pytest

import autolayout
import costmodels
import mesh_tf as mtf
from autolayout import arguments
from autolayout import cli
from tests.autolayout import graphs

G, OUTS = graphs.mlp(64, 64, 128)
OTHER, OTHER_OUTS = graphs.mlp(64, 64, 128)
M, T = "x:2;y:4", "dgx-h100"


def _solve(**kw):
  args = dict(graph=G, mesh_shape=M, outputs=OUTS, topology=T)
  args.update(kw)
  return lambda: mtf.auto_layout(**args)


MISUSES = [
    # (id, call, pattern the message must match)
    ("graph-list", _solve(graph=[1]),
     r"graph must be an mtf Graph.*mtf\.Graph"),
    ("graph-none", _solve(graph=None), r"graph must be an mtf Graph, got "
     "NoneType"),
    ("graph-empty", _solve(graph=mtf.Graph(), outputs=None),
     "graph has no operations"),
    ("mesh-int", _solve(mesh_shape=8), r"mesh_shape must be.*'data:4;model:4'"),
    ("mesh-empty", _solve(mesh_shape=""), r"mesh_shape='' has no axes"),
    ("mesh-zero", _solve(mesh_shape="x:0;y:8"), r"mesh_shape='x:0;y:8'.*mesh "
     "axis x=0 .*a size of at least 1"),
    ("mesh-negative", _solve(mesh_shape="x:-2;y:-4"),
     r"mesh_shape='x:-2;y:-4'"),
    ("mesh-duplicate", _solve(mesh_shape="x:2;x:4"),
     r"mesh_shape=.*appear more than once"),
    ("mesh-malformed", _solve(mesh_shape="rows=2"), r"mesh_shape='rows=2'.*"
     "name:value"),
    ("mesh-too-big", _solve(mesh_shape="x:1048576;y:1048576"),
     r"has 1099511627776 processors, over the 1048576"),
    ("mesh-not-fitting", _solve(mesh_shape="x:16"), r"has 16 processors but "
     "topology 'dgx-h100' has 8 chips.*e\\.g\\. 'gpu:8'"),
    ("outputs-str", _solve(outputs="loss"), r"outputs must be a Tensor"),
    ("outputs-other-graph", _solve(outputs=OTHER_OUTS),
     r"outputs\[0\] .* another graph"),
    ("outputs-empty", _solve(outputs=[]), r"outputs is empty.*or None"),
    ("outputs-not-tensor", _solve(outputs=[OUTS[0], 3]),
     r"outputs\[1\] is int 3, not an mtf Tensor"),
    ("topology-unknown", _solve(topology="tpu-v9"), r"unknown topology "
     "'tpu-v9'; use a preset"),
    ("budget-negative", _solve(memory_budget=-5), r"memory_budget=-5 is not a "
     "positive size; e\\.g\\. 16GB"),
    ("budget-zero", _solve(memory_budget=0), r"memory_budget=0 is not a "
     "positive"),
    ("budget-bad-unit", _solve(memory_budget="16XB"), r"cannot read "
     "memory_budget='16XB' as a size; e\\.g\\. 16GB"),
    ("budget-overflow", _solve(memory_budget=1e99), r"memory_budget=1e\+99 is "
     "over 1 EiB.*none for no limit"),
    ("budget-nan", _solve(memory_budget=math.nan), r"memory_budget=nan is not "
     "a finite size"),
    ("budget-bool", _solve(memory_budget=True), r"memory_budget=True is not a "
     "size"),
    ("budget-percent", _solve(memory_budget="-5%"), r"memory_budget='-5%' is "
     "not a percentage"),
    ("objective", _solve(objective="speed"), r"unknown objective 'speed': "
     "objective= takes one of time, comm, memory, latency"),
    ("time-limit-zero", _solve(time_limit_s=0), r"time_limit_s=0\.0 is out of "
     "range.*time_limit_s=60"),
    ("time-limit-nan", _solve(time_limit_s=math.nan), r"time_limit_s=nan"),
    ("time-limit-inf", _solve(time_limit_s=math.inf), r"time_limit_s=inf"),
    ("time-limit-str", _solve(time_limit_s="60"), r"time_limit_s='60' is not "
     "a number of seconds"),
    ("workers-zero", _solve(num_workers=0), r"num_workers=0 is out of range: "
     "it takes 1 to 256; use e\\.g\\. num_workers=2"),
    ("workers-negative", _solve(num_workers=-3), r"num_workers=-3"),
    ("workers-fraction", _solve(num_workers=2.5), r"num_workers=2\.5 is not an "
     "integer"),
    ("workers-huge", _solve(num_workers=10**6), r"num_workers=1000000 is out "
     "of range"),
    ("seed-str", _solve(seed="a"), r"seed='a' is not an integer; use e\.g\. "
     "seed=0"),
    ("seed-overflow", _solve(seed=2**40),
     r"seed=1099511627776 is out of range"),
    ("tie-break", _solve(tie_break=("speed",)), r"tie_break entry 'speed'.*"
     "tie_break=\\('memory',\\)"),
    ("forbid", _solve(forbid=[("batch",)]), r"forbid=.* must be \(dim, axis\) "
     "pairs"),
    ("solver-params-key", _solve(solver_params={"foo": 1}),
     r"solver_params has 'foo', which is not a CP-SAT parameter"),
    ("solver-params-value", _solve(solver_params={"num_workers": "x"}),
     r"solver_params\['num_workers'\]='x' is not a valid value"),
    ("progress", _solve(progress=3), r"progress=3 is not callable"),
    ("keyword-typo", lambda: mtf.auto_layout(G, M, OUTS, topology=T,
                                             time_limit=5),
     r"mtf\.auto_layout\(\) has no argument 'time_limit'; did you mean "
     r"time_limit_s="),
    ("mesh-search-zero", lambda: mtf.auto_mesh_and_layout(G, 0, OUTS,
                                                          topology=T),
     r"num_devices=0 is out of range: it takes 1 to \d+; use e\.g\. "
     "num_devices=8"),
    ("mesh-search-str", lambda: mtf.auto_mesh_and_layout(G, "8", OUTS,
                                                         topology=T),
     r"num_devices='8' is not an integer"),
    ("mesh-search-max-axes", lambda: mtf.auto_mesh_and_layout(
        G, 8, OUTS, topology=T, max_axes=0), r"max_axes=0 is out of range: it "
     "takes 1 to 4; use e\\.g\\. max_axes=2"),
    ("pareto-zero", lambda: autolayout.pareto(G, M, OUTS, T, max_points=0),
     r"max_points=0 is out of range.*max_points=12"),
    ("pareto-negative",
     lambda: autolayout.pareto(G, M, OUTS, T, max_points=-1),
     r"max_points=-1"),
    ("search-type", _solve(search="tables"), r"search must be a "
     "LayoutSearch, got str"),
    ("layout-search-graph", lambda: autolayout.LayoutSearch(G.operations),
     r"graph must be an mtf Graph, got list"),
    ("layout-search-outputs", lambda: autolayout.LayoutSearch(G, OTHER_OUTS),
     r"outputs\[0\] .* another graph"),
    ("layout-search-solve", lambda: autolayout.LayoutSearch(G, OUTS).solve(
        M, T, num_workers=0), r"num_workers=0 is out of range"),
    ("explain-graph", lambda: autolayout.explain(None, M, ""),
     r"graph must be an mtf Graph"),
    ("evaluate-graph", lambda: costmodels.evaluate(None, M, "", T),
     r"graph must be an mtf Graph"),
    ("evaluate-rules", lambda: costmodels.evaluate(G, M, "batch", T),
     r"layout_rules='batch' is not layout rules.*'batch:data;d_ff:model'"),
    ("evaluate-rules-type", lambda: costmodels.evaluate(G, M, 5, T),
     r"layout_rules must be a rules string"),
    ("evaluate-outputs", lambda: costmodels.evaluate(G, M, "", T, outputs="x"),
     r"outputs must be a Tensor"),
    ("evaluate-axis", lambda: costmodels.evaluate(G, M, "batch:q", T),
     r"mesh axis 'q'.*use one of \['x', 'y'\]"),
]


@pytest.mark.parametrize("call,pattern", [m[1:] for m in MISUSES],
                         ids=[m[0] for m in MISUSES])
def test_misuse_raises_mtf_error_naming_the_argument(call, pattern):
  with pytest.raises(mtf.MtfError, match=pattern):
    call()


def test_latency_of_a_training_graph_is_an_error():
  from mesh_tf import models
  from autolayout.cli.models import load_model
  model = load_model("mlp_tiny", {}, train=True)
  with pytest.raises(mtf.InvalidArgumentError,
                     match=r"objective='latency' .* training step .* "
                           r"objective='time'"):
    mtf.auto_layout(model.graph, "x:8", None, topology=T, objective="latency")
  assert models  # the zoo is importable without TensorFlow


def test_a_combined_update_makes_a_training_graph():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  frozen = mtf.get_variable(mesh, "frozen", "d:4", trainable=False)
  assert not arguments.is_training_graph(g)
  mtf.combine_assignments([mtf.apply_gradient_descent(frozen, frozen, 0.1)])
  assert not arguments.is_training_graph(g)  # only a frozen variable written
  a, b = (mtf.get_variable(mesh, n, "d:4") for n in "ab")
  (op,) = mtf.combine_assignments(
      [mtf.apply_gradient_descent(v, v, 0.1) for v in (a, b)])
  assert [v.name for v in op.variables] == ["a", "b"]
  assert arguments.is_training_graph(g)


def test_huge_tensor_is_a_clear_error_not_an_overflow():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.zeros(mesh, "batch:1000000000000,d_model:1048576")
  y = mtf.reduce_sum(x)
  with pytest.raises(mtf.InvalidArgumentError,
                     match=r"tensor .* \[batch=1000000000000, d_model=1048576\]"
                           r" holds .* over the 1 EiB"):
    mtf.auto_layout(g, M, [y], topology=T)


def test_size_strings_are_accepted_and_equal_bytes():
  by_string = mtf.auto_layout(G, M, OUTS, topology=T, memory_budget="16GB")
  by_bytes = mtf.auto_layout(G, M, OUTS, topology=T,
                             memory_budget=16 * 10**9)
  assert by_string.memory_budget == by_bytes.memory_budget == 16 * 10**9
  assert str(by_string.rules) == str(by_bytes.rules)
  # "hbm" and percentages are of the usable HBM (less the runtime reserve),
  # as in the CLI.
  hbm = costmodels.hardware.usable_memory_bytes(
      costmodels.get_topology(T).chip)
  assert mtf.auto_layout(G, M, OUTS, topology=T,
                         memory_budget="hbm").memory_budget == hbm
  assert mtf.auto_layout(G, M, OUTS, topology=T,
                         memory_budget="50%").memory_budget == hbm // 2
  assert mtf.auto_layout(G, M, OUTS, topology=T,
                         memory_budget="none").memory_budget is None


def test_api_defaults_are_the_cli_defaults():
  parser = cli.build_parser()
  sub = next(a for a in parser._actions  # pylint: disable=protected-access
             if a.dest == "command").choices
  solve = sub["solve"].parse_args(["-m", "mlp_tiny"])
  # Left out, the topology, budget and objective are a plan's own when one
  # is given (-l @plan.json, or solve --hint alone); else these defaults.
  assert (solve.topology, solve.memory_budget, solve.objective) == (
      None, None, None)
  from autolayout.cli import common
  common.Setup(solve)
  d = arguments.DEFAULTS
  assert solve.topology == d.topology
  assert solve.memory_budget == d.memory_budget
  assert solve.objective == d.objective
  assert solve.time_limit == d.time_limit_s
  assert solve.workers == d.num_workers
  assert solve.seed == d.seed
  assert solve.max_axes is None  # only with --devices, then max_axes=2
  assert sub["mesh"].parse_args(["-m", "mlp_tiny"]).max_axes == d.max_axes
  assert sub["pareto"].parse_args(["-m", "mlp_tiny"]).max_points == (
      d.max_points)


def test_same_question_same_answer_from_api_and_cli(capsys):
  """``mtf.auto_layout(graph)`` with every default answers what
  ``mtf-layout solve`` does."""
  import json
  from autolayout.cli.models import load_model
  model = load_model("transformer_tiny")
  api = mtf.auto_layout(model.graph)
  assert cli.main(["solve", "-m", "transformer_tiny", "-f", "json"]) == 0
  doc = json.loads(capsys.readouterr().out)["result"]
  assert doc["topology"] == arguments.DEFAULTS.topology
  # Without a mesh both search the mesh shapes (physically named axes).
  assert doc["mesh"] == ";".join(
      f"{a.name}:{a.size}" for a in api.mesh_shape)
  assert doc["rules"] == str(api.rules)
  assert doc["step_time_s"] == api.step_time_s
  assert doc["solver"]["memory_budget_bytes"] == api.memory_budget


def test_version(capsys):
  assert cli.main(["--version"]) == 0
  assert capsys.readouterr().out.strip() == f"mtf-layout {mtf.__version__}"


@pytest.mark.parametrize("name,value", [("tie_break", ("memory",)),
                                        ("forbid", [("batch", "x")]),
                                        ("solver_params", {"log_search_progress": False}),
                                        ("progress", print)])
def test_per_mesh_options_without_a_mesh_are_errors(name, value):
  import autolayout
  from mesh_tf import models
  m = models.build_model("mlp_tiny")
  with pytest.raises(mtf.InvalidArgumentError, match=f"{name} applies to one given mesh"):
    autolayout.auto_layout(m.graph, None, None, "tpu-v5e-2x4", **{name: value})
