"""Small graphs and an independent brute force for the layout-search tests."""

import itertools
import math

import numpy as np

import costmodels
import mesh_tf as mtf
from mesh_tf.training import optimize, storage
from mesh_tf.gradients import gradients

TOPOLOGY = "dgx-h100"


def mlp(batch=512, d_model=4096, d_ff=16384):
  """x -> relu(x w1) w2 + x -> sum of squares (forward only)."""
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  b, d, f = (mtf.Dimension("batch", batch), mtf.Dimension("d_model", d_model),
             mtf.Dimension("d_ff", d_ff))
  x = mtf.get_variable(mesh, "x", mtf.Shape([b, d]), trainable=False)
  w1 = mtf.get_variable(mesh, "w1", mtf.Shape([d, f]))
  w2 = mtf.get_variable(mesh, "w2", mtf.Shape([f, d]))
  h = mtf.relu(mtf.einsum([x, w1], reduced_dims=[d]))
  y = mtf.einsum([h, w2], reduced_dims=[f]) + x
  loss = mtf.reduce_sum(y * y)
  return g, [loss]


def training_mlp(batch=256, d_model=1024, d_ff=4096, stage=0):
  """A two-layer MLP's SGD training step (``x`` is not trained); with
  ``stage`` > 0 its weights are stored ZeRO-``stage`` sharded."""
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.get_variable(mesh, "x", f"batch:{batch};d_model:{d_model}",
                       trainable=False)
  w1 = mtf.get_variable(mesh, "w1", f"d_model:{d_model};d_ff:{d_ff}")
  w2 = mtf.get_variable(mesh, "w2", f"d_ff:{d_ff};d_model:{d_model}")
  h = mtf.relu(mtf.einsum([x, w1], reduced_dims=[w1.shape[0]]))
  y = mtf.einsum([h, w2], reduced_dims=[w2.shape[0]])
  loss = mtf.reduce_sum(y * y)
  if stage:
    storage.shard_storage(g, stage)
  variables = list(g.trainable_variables)
  grads = gradients([loss], [v.outputs[0] for v in variables])
  optimize.SgdOptimizer(0.1).apply_grads(grads, variables)
  return g, [loss]


def merged_sums(n=256, k=512):
  """Two einsums over the same reduced dim added together (one lazy
  all-reduce when both are pending) and a third forced alone."""
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  a, kk, c = (mtf.Dimension("a", n), mtf.Dimension("k", k),
              mtf.Dimension("c", n))
  x = mtf.get_variable(mesh, "x", mtf.Shape([a, kk]))
  w = mtf.get_variable(mesh, "w", mtf.Shape([kk, c]))
  v = mtf.get_variable(mesh, "v", mtf.Shape([kk, c]))
  s = mtf.einsum([x, w], reduced_dims=[kk]) + mtf.einsum([x, v],
                                                         reduced_dims=[kk])
  t = mtf.exp(mtf.einsum([x, w], reduced_dims=[kk]))
  return g, [mtf.reduce_max(s + t)]


def brute_force(graph, mesh_shape, outputs, topology=TOPOLOGY, key=None):
  """``[(value, rules string, report)]`` of every layout the cost model
  accepts, enumerated without the search's own code: every map of dims to
  (axis or nothing), keeping those ``costmodels.evaluate`` does not reject.
  ``key(report)`` picks the value (default: step time)."""
  key = key or (lambda r: r.step_time_s)
  mesh_shape = mtf.convert_to_shape(mesh_shape)
  dims = sorted({d.name for t in graph.tensors for d in t.shape})
  axes = [a.name for a in mesh_shape if a.size > 1]
  out = []
  for combo in itertools.product([None] + axes, repeat=len(dims)):
    rules = ";".join(f"{d}:{a}" for d, a in zip(dims, combo) if a)
    try:
      r = costmodels.evaluate(graph, mesh_shape, rules, topology,
                              outputs=outputs)
    except mtf.LayoutError:
      continue
    out.append((key(r), rules, r))
  return out


def build_random(spec):
  """A graph from a hypothesis-drawn ``spec``: ``(dims, steps)``.

  ``dims`` is a list of sizes (names d0, d1...); ``steps`` a list of
  ``(kind, i, j, mask)`` picking existing tensors by index modulo their
  count, and a bit mask of dims.
  """
  sizes, steps = spec
  dims = [mtf.Dimension(f"d{i}", s) for i, s in enumerate(sizes)]
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")

  def pick(mask):
    ds = [d for i, d in enumerate(dims) if mask >> i & 1]
    return mtf.Shape(ds or dims[:1])
  ts = [mtf.get_variable(mesh, "v0", pick(steps[0][3] if steps else 3)),
        mtf.get_variable(mesh, "v1", pick(steps[0][2] + 5 if steps else 6))]
  for kind, i, j, mask in steps:
    a, b = ts[i % len(ts)], ts[j % len(ts)]
    if kind == "einsum":
      names = set(a.shape.dimension_names) | set(b.shape.dimension_names)
      out = [d for d in dims if d.name in names and (mask >> int(d.name[1:])
                                                     & 1)]
      y = mtf.einsum([a, b], output_shape=mtf.Shape(out))
    elif kind == "add":
      same = [t for t in ts if t.shape == a.shape and t is not a]
      y = a + (same[j % len(same)] if same else a)
    elif kind == "mul":
      y = a * b
    elif kind == "exp":
      y = mtf.exp(a)
    elif kind == "sum":
      keep = [d for d in a.shape if mask >> int(d.name[1:]) & 1]
      y = mtf.reduce_sum(a, output_shape=mtf.Shape(keep))
    else:  # "max"
      keep = [d for d in a.shape if mask >> int(d.name[1:]) & 1]
      y = mtf.reduce_max(a, output_shape=mtf.Shape(keep))
    ts.append(y)
  return g, None


def build_random_training(spec):
  """:func:`build_random` plus the gradient of the sum of its last tensor
  with respect to its variables, and an SGD update (backward merges pending
  sums of gradient contributions)."""
  g, _ = build_random(spec)
  last = g.operations[-1].outputs[0]
  if last.dtype != "float32":
    last = mtf.cast(last, "float32")
  loss = mtf.reduce_sum(last)
  grads = gradients([loss], g.trainable_variables)
  optimize.SgdOptimizer(0.1).apply_grads(grads, g.trainable_variables)
  return g, None


def as_numpy_reference(values):
  return [np.asarray(v) for v in values]


def decision_candidates(config, dims, mesh, topology, stages, recomputes,
                        ks):
  """``[(report, decisions, rules)]`` of every training candidate (bf16,
  ``stages`` x ``recomputes`` x ``ks``) under every map of ``dims`` (those
  its graph has) to mesh axis ``x`` or nothing, that the cost model
  accepts: the brute force the decision searches are checked against."""
  from autolayout.training import decisions  # pylint: disable=g-import-not-at-top
  out = []
  for stage, rc, k in itertools.product(stages, recomputes, ks):
    d = decisions.TrainingDecisions("bfloat16", stage, rc, k)
    training = decisions.build_training(config, d)
    present = [n for n in dims if any(
        n in t.shape.dimension_names for t in training.graph.tensors)]
    for combo in itertools.product((None, "x"), repeat=len(present)):
      rules = ";".join(f"{n}:{a}" for n, a in zip(present, combo) if a)
      try:
        r = costmodels.evaluate(training.graph, mesh, rules, topology,
                                microbatches=training.plan)
      except mtf.LayoutError:
        continue
      out.append((r, d, rules))
  return out


def assert_solver_matches_brute_force(graph, mesh, outputs, objective,
                                      overlap, topology=TOPOLOGY):
  """The search's optimum under ``objective`` ("time" or "comm") and
  ``overlap`` equals the best of every layout priced by the cost model, and
  its objective value equals the cost model's; returns the search result."""
  import autolayout  # pylint: disable=g-import-not-at-top
  res = autolayout.auto_layout(graph, mesh, outputs, topology,
                               objective=objective, overlap=overlap)
  assert res.status == "optimal"
  key = {"time": lambda r: r.step_time_s, "comm": lambda r: r.comm_time_s}
  best = math.inf
  for rules in autolayout.search.assignments.all_layouts(graph, mesh):
    r = costmodels.evaluate(graph, mesh, rules, topology, outputs=outputs,
                            overlap=overlap)
    best = min(best, key[objective](r))
  mine = key[objective](res.report)
  assert math.isclose(mine, best, rel_tol=1e-9, abs_tol=1e-15)
  assert math.isclose(res.objective_value, mine, rel_tol=1e-12)
  return res
