"""Benchmark: one training step (forward + backward + SGD) of the zoo
Transformer LM lowered on 8 logical CPU devices, against the same model in
plain single-device TensorFlow.

Model: d_model 128, 8 heads, d_kv 16, d_ff 512, vocab 256, batch 8, length
64; 1, 8 and 32 layers.  Mesh ``rows:2;cols:4``, layout
``batch:rows;heads:cols;d_ff:cols;vocab:cols``.

Each layer count runs three ways, each in a fresh subprocess (so that peak
RSS and TF state are its own): the mesh step as mesh-tf lowers it by default
(slicewise work fused into per-device TF functions shared between layers,
see mesh_tf/lowering/fusion.py), the same step lowered unfused
(``PlacementMeshImpl(fuse=False)``), and the plain-TF baseline.  Reported:
  * graph build: model + gradients + optimizer ops (pure Python);
  * lowering: tracing the step's tf.function (the mtf lowering runs here);
  * first step: lowering + the first call (TF graph optimisation + run);
  * steady step: median of the following steps;
  * TF ops in the traced step graph (deterministic), and per layer; and the
    TF ops one step runs, counting each fused call as its body's ops;
  * peak RSS;
  * the lowering's time per TF op, next to what TF alone takes per op on
    this machine (tracing a chain of relus);
  * ratios: steady step against plain TF, and fused against unfused.

Targets (issue 3): at most 1,800 TF ops per layer on 8 devices; lowering plus
first step of the 32-layer model within 25 s on a 2-core machine.

Reproduce:
  python benchmarks/train_step.py                 # 1, 8 and 32 layers
  python benchmarks/train_step.py --layers 1 8 --steps 5 --no-unfused
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

D_MODEL, HEADS, D_KV, D_FF, VOCAB, BATCH, LENGTH = 128, 8, 16, 512, 256, 8, 64
MESH = "rows:2;cols:4"
LAYOUT = "batch:rows;heads:cols;d_ff:cols;vocab:cols"


def _setup_tf(num_devices=8):
  import mesh_tf as mtf  # pylint: disable=import-outside-toplevel
  tf = mtf.set_logical_cpu_devices(num_devices)
  return tf


def _peak_rss_mib():
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def tf_op_cost_us(tf, n=2000):
  """Microseconds TF itself takes to add one op to a tf.function graph on
  this machine (a chain of ``n`` relu ops, each under a device scope, as
  the lowering places them): the floor under the lowering time per op."""
  devices = [d.name for d in tf.config.list_logical_devices("CPU")]

  @tf.function(autograph=False)
  def chain(x):
    for i in range(n):
      with tf.device(devices[i % len(devices)]):
        x = tf.nn.relu(x)
    return x
  t0 = time.perf_counter()
  fn = chain.get_concrete_function(tf.TensorSpec([4], tf.float32))
  return (time.perf_counter() - t0) / len(fn.graph.get_operations()) * 1e6


def _executed_ops(fn, fuser):
  """TF ops one step runs: the step graph's, with each call of a fused
  function counted as the ops of its body (without the Identity ops that
  name its outputs; arguments are not nodes)."""
  bodies = {}
  if fuser is not None:
    for atomic, _ in fuser._functions.values():  # pylint: disable=protected-access
      if atomic is None:  # a one-op segment, run unfused
        continue
      name = atomic.definition.signature.name
      bodies[name] = sum(1 for n in atomic.definition.node_def
                         if n.op != "Identity")
  total = 0
  for op in fn.graph.get_operations():
    if op.type in ("PartitionedCall", "StatefulPartitionedCall"):
      total += bodies.get(op.get_attr("f").name, 1)
    else:
      total += 1
  return total, sum(bodies.values())


def run_mesh(layers, steps, fuse=True):
  """Times the mtf step on 8 devices; returns a dict of numbers."""
  tf = _setup_tf(8)
  import mesh_tf as mtf
  from mesh_tf import models, training
  from mesh_tf.training import optimize
  from mesh_tf.lowering.placement import PlacementMeshImpl
  out = {"layers": layers, "mode": "fused" if fuse else "unfused"}
  t0 = time.perf_counter()
  model = models.transformer_lm(
      layers=layers, d_model=D_MODEL, heads=HEADS, d_kv=D_KV, d_ff=D_FF,
      vocab=VOCAB, length=LENGTH, batch=BATCH)
  impl = PlacementMeshImpl(MESH, LAYOUT, mtf.logical_cpu_devices(8),
                           fuse=fuse)
  step = training.TrainStep(model.graph, model.mesh, model.loss,
                            dict(model.inputs), impl,
                            optimize.SgdOptimizer(0.01))
  out["graph_build_s"] = time.perf_counter() - t0
  out["mtf_ops"] = len(model.graph.operations)
  t0 = time.perf_counter()
  step.initialize_variables()
  out["variable_init_s"] = time.perf_counter() - t0
  values = model.random_values(seed=0)
  t0 = time.perf_counter()
  fn = step.concrete_function()
  out["lowering_s"] = time.perf_counter() - t0
  out["tf_ops"] = len(fn.graph.get_operations())
  out["executed_ops"], out["fused_body_ops"] = _executed_ops(fn, impl.fuser)
  if impl.fuser is not None:
    out["fusion"] = dict(impl.fuser.stats)
  t1 = time.perf_counter()
  loss = float(step(**values))
  out["first_step_s"] = time.perf_counter() - t0
  out["first_call_s"] = time.perf_counter() - t1
  times = []
  for _ in range(steps):
    t1 = time.perf_counter()
    loss = float(step(**values))
    times.append(time.perf_counter() - t1)
  out["steady_step_s"] = sorted(times)[len(times) // 2]
  out["loss"] = loss
  out["peak_rss_mib"] = _peak_rss_mib()
  out["tf_op_cost_us"] = tf_op_cost_us(tf)
  return out


def _plain_tf_model(tf, layers):
  """The same Transformer LM in plain single-device TF (pre-norm, tied)."""
  rng = tf.random.Generator.from_seed(0)

  def var(shape, std=0.02, value=None):
    if value is not None:
      return tf.Variable(tf.fill(shape, value))
    return tf.Variable(rng.normal(shape, stddev=std))
  params = {"emb": var([VOCAB, D_MODEL], 1.0),
            "pos": var([LENGTH, D_MODEL]),
            "final_scale": var([D_MODEL], value=1.0),
            "final_bias": var([D_MODEL], value=0.0)}
  for i in range(layers):
    for n in ("q", "k", "v", "o"):
      params[f"{i}/{n}"] = var([D_MODEL, HEADS, D_KV])
    params[f"{i}/wi"] = var([D_MODEL, D_FF])
    params[f"{i}/wo"] = var([D_FF, D_MODEL])
    for n in ("ln1", "ln2"):
      params[f"{i}/{n}_scale"] = var([D_MODEL], value=1.0)
      params[f"{i}/{n}_bias"] = var([D_MODEL], value=0.0)
  names = sorted(params)
  variables = [params[n] for n in names]

  def norm(x, scale, bias):
    mean = tf.reduce_mean(x, -1, keepdims=True)
    xc = x - mean
    var_ = tf.reduce_mean(tf.square(xc), -1, keepdims=True)
    return xc * tf.math.rsqrt(var_ + 1e-6) * scale + bias

  causal = tf.linalg.band_part(tf.ones([LENGTH, LENGTH]), -1, 0)
  bias = (1.0 - causal) * -1e9

  def loss_fn(inputs, targets):
    p = params
    x = tf.gather(p["emb"], inputs) + p["pos"]
    for i in range(layers):
      y = norm(x, p[f"{i}/ln1_scale"], p[f"{i}/ln1_bias"])
      q = tf.einsum("bld,dhk->bhlk", y, p[f"{i}/q"])
      k = tf.einsum("bld,dhk->bhlk", y, p[f"{i}/k"])
      v = tf.einsum("bld,dhk->bhlk", y, p[f"{i}/v"])
      logits = tf.einsum("bhlk,bhmk->bhlm", q, k) + bias
      w = tf.nn.softmax(logits, -1)
      a = tf.einsum("bhlm,bhmk->bhlk", w, v)
      x = x + tf.einsum("bhlk,dhk->bld", a, p[f"{i}/o"])
      y = norm(x, p[f"{i}/ln2_scale"], p[f"{i}/ln2_bias"])
      x = x + tf.nn.relu(y @ p[f"{i}/wi"]) @ p[f"{i}/wo"]
    x = norm(x, p["final_scale"], p["final_bias"]) * (D_MODEL ** -0.5)
    logits = tf.einsum("bld,vd->blv", x, p["emb"])
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        targets, logits))

  @tf.function(input_signature=[tf.TensorSpec([BATCH, LENGTH], tf.int32)] * 2)
  def step(inputs, targets):
    with tf.GradientTape() as tape:
      loss = loss_fn(inputs, targets)
    grads = tape.gradient(loss, variables)
    for v, g in zip(variables, grads):
      v.assign_sub(0.01 * tf.convert_to_tensor(g))
    return loss
  return step


def run_plain(layers, steps):
  """Times the same model in plain single-device TF."""
  tf = _setup_tf(1)
  import numpy as np
  step = _plain_tf_model(tf, layers)
  rng = np.random.RandomState(0)
  ids = rng.randint(0, VOCAB, size=(BATCH, LENGTH)).astype("int32")
  t0 = time.perf_counter()
  fn = step.get_concrete_function()
  out = {"layers": layers, "tf_ops": len(fn.graph.get_operations())}
  float(step(ids, ids))
  out["first_step_s"] = time.perf_counter() - t0
  times = []
  for _ in range(steps):
    t1 = time.perf_counter()
    float(step(ids, ids))
    times.append(time.perf_counter() - t1)
  out["steady_step_s"] = sorted(times)[len(times) // 2]
  out["peak_rss_mib"] = _peak_rss_mib()
  return out


def run_side_by_side(layers, steps):
  """Steady steps of the fused mesh step, the unfused one and plain TF,
  taken in turn in one process, so that the machine's load drifts over all
  three alike; returns the medians."""
  tf = _setup_tf(8)
  import numpy as np
  import mesh_tf as mtf
  from mesh_tf import models, training
  from mesh_tf.training import optimize
  from mesh_tf.lowering.placement import PlacementMeshImpl
  calls = {}
  for mode in ("fused", "unfused"):
    model = models.transformer_lm(
        layers=layers, d_model=D_MODEL, heads=HEADS, d_kv=D_KV, d_ff=D_FF,
        vocab=VOCAB, length=LENGTH, batch=BATCH)
    impl = PlacementMeshImpl(MESH, LAYOUT, mtf.logical_cpu_devices(8),
                             fuse=mode == "fused")
    step = training.TrainStep(model.graph, model.mesh, model.loss,
                              dict(model.inputs), impl,
                              optimize.SgdOptimizer(0.01))
    values = model.random_values(seed=0)
    calls[mode] = lambda step=step, values=values: step(**values)
  plain = _plain_tf_model(tf, layers)
  ids = np.random.RandomState(0).randint(0, VOCAB, size=(BATCH, LENGTH))
  ids = ids.astype("int32")
  calls["plain"] = lambda: plain(ids, ids)
  times = {k: [] for k in calls}
  for call in calls.values():
    float(call())  # trace and warm up
  for _ in range(steps):
    for k, call in calls.items():
      t0 = time.perf_counter()
      float(call())
      times[k].append(time.perf_counter() - t0)
  return {"layers": layers, **{f"{k}_steady_s": sorted(v)[len(v) // 2]
                               for k, v in times.items()}}


def _subprocess(kind, layers, steps):
  cmd = [sys.executable, os.path.abspath(__file__), "--single", kind,
         "--layers", str(layers), "--steps", str(steps)]
  if kind == "unfused":
    cmd[cmd.index("unfused")] = "mesh"
    cmd.append("--no-fuse")
  env = dict(os.environ)
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
  res = subprocess.run(cmd, capture_output=True, text=True, env=env,
                       check=False)
  for line in res.stdout.splitlines():
    if line.startswith("RESULT "):
      return json.loads(line[len("RESULT "):])
  raise RuntimeError(f"{kind} run with {layers} layers failed:\n"
                     f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--layers", type=int, nargs="+", default=[1, 8, 32])
  parser.add_argument("--steps", type=int, default=10,
                      help="steady-state steps to time (median reported)")
  parser.add_argument("--single", choices=["mesh", "plain", "side"],
                      default=None,
                      help=argparse.SUPPRESS)
  parser.add_argument("--no-fuse", action="store_true",
                      help=argparse.SUPPRESS)
  parser.add_argument("--no-baseline", action="store_true",
                      help="skip the plain-TF baseline")
  parser.add_argument("--no-unfused", action="store_true",
                      help="skip the mesh step lowered without fusion")
  args = parser.parse_args(argv)
  if args.single:
    if args.single == "mesh":
      result = run_mesh(args.layers[0], args.steps, fuse=not args.no_fuse)
    elif args.single == "side":
      result = run_side_by_side(args.layers[0], args.steps)
    else:
      result = run_plain(args.layers[0], args.steps)
    print("RESULT " + json.dumps(result))
    return 0

  from rich.console import Console
  from rich.table import Table
  console = Console(width=220)
  kinds = ["mesh"] + ([] if args.no_unfused else ["unfused"])
  runs = {}  # (kind, layers) -> result
  for n in args.layers:
    for kind in kinds + ([] if args.no_baseline else ["plain"]):
      console.print(f"[bold]{n} layer(s)[/bold]: {kind} ...")
      runs[(kind, n)] = _subprocess(kind, n, args.steps)
    if not args.no_unfused and not args.no_baseline:
      console.print(f"[bold]{n} layer(s)[/bold]: steady steps side by side "
                    "...")
      runs[("side", n)] = _subprocess("side", n, args.steps)
  table = Table(title=f"train step, mesh {MESH}, layout {LAYOUT}")
  for col in ("layers", "mode", "build s", "lowering s",
              "first step s", "steady s", "step-graph TF ops", "per layer",
              "TF ops run", "per layer", "lowering us/op", "TF floor us/op",
              "peak RSS MiB"):
    table.add_column(col, justify="right")
  smallest = min(args.layers)

  def per_layer(kind, n, field):
    if n == smallest:
      return "-"
    base = runs[(kind, smallest)][field]
    return f"{(runs[(kind, n)][field] - base) / (n - smallest):.0f}"
  for n in args.layers:
    plain = runs.get(("plain", n))
    for kind in kinds:
      r = runs[(kind, n)]
      table.add_row(
          str(n), r["mode"], f"{r['graph_build_s']:.2f}",
          f"{r['lowering_s']:.2f}", f"{r['first_step_s']:.2f}",
          f"{r['steady_step_s']:.3f}", str(r["tf_ops"]),
          per_layer(kind, n, "tf_ops"), str(r["executed_ops"]),
          per_layer(kind, n, "executed_ops"),
          f"{r['lowering_s'] / r['tf_ops'] * 1e6:.0f}",
          f"{r['tf_op_cost_us']:.0f}", f"{r['peak_rss_mib']:.0f}")
    if plain is not None:
      table.add_row(str(n), "plain TF, 1 device", "-", "-",
                    f"{plain['first_step_s']:.2f}",
                    f"{plain['steady_step_s']:.3f}", str(plain["tf_ops"]),
                    "-", "-", "-", "-", "-", f"{plain['peak_rss_mib']:.0f}")
  console.print(table)
  if "unfused" in kinds:
    side = ("side", args.layers[0]) in runs
    ratios = Table(title="ratios, same layer count (steady steps taken in "
                   "turn in one process)")
    for col in ("layers", "first step fused / unfused",
                "step-graph ops fused / unfused", "steady fused s",
                "steady unfused s", "steady plain TF s",
                "steady fused / unfused", "steady fused / plain TF",
                "steady unfused / plain TF"):
      ratios.add_column(col, justify="right")
    for n in args.layers:
      f, u = runs[("mesh", n)], runs[("unfused", n)]
      row = [str(n), f"{f['first_step_s'] / u['first_step_s']:.2f}x",
             f"{f['tf_ops'] / u['tf_ops']:.2f}x"]
      if side:
        s = runs[("side", n)]
        row += [f"{s['fused_steady_s']:.3f}", f"{s['unfused_steady_s']:.3f}",
                f"{s['plain_steady_s']:.3f}",
                f"{s['fused_steady_s'] / s['unfused_steady_s']:.2f}x",
                f"{s['fused_steady_s'] / s['plain_steady_s']:.2f}x",
                f"{s['unfused_steady_s'] / s['plain_steady_s']:.2f}x"]
      else:
        row += ["-"] * 6
      ratios.add_row(*row)
    console.print(ratios)
  console.print(
      "per layer = (value(L) - value(smallest L)) / (L - smallest L).  "
      "'step-graph TF ops' counts the ops of the traced step; with fusion a "
      "call of a fused segment function is one op there, and 'TF ops run' "
      "counts its body's ops instead (what TF executes per step).  Targets "
      "(issue 3): at most 1,800 TF ops per layer; lowering + first step of "
      "32 layers within 25 s.  'TF floor us/op' is what TF alone takes to "
      "add one op to a traced graph here (a relu chain).")
  console.print(f"reproduce: python benchmarks/train_step.py --layers "
                f"{' '.join(map(str, args.layers))} --steps {args.steps}")
  console.print("RESULTS " + json.dumps(
      [dict(r, kind=k[0]) for k, r in runs.items()]))
  return 0


if __name__ == "__main__":
  sys.exit(main())
