"""Benchmark: a Mesh TensorFlow-style program in its own mode (a
``tf.compat.v1`` Session loop) against the same model run by ``TrainStep``,
and against the original Mesh TensorFlow when it is installed.

The model is the one of ``examples/port_from_mesh_tensorflow.py``: d_model
128, 8 heads, d_ff 512, vocab 256, batch 8, length 64, SGD, mesh
``rows:2;cols:4``, layout ``batch:rows;heads:cols;d_ff:cols;vocab:cols``, 8
logical CPU devices.  Its source is loaded unchanged; for the original,
only its ``import mesh_tf as mtf`` line is replaced by ``import
mesh_tensorflow as mtf`` (``pip install --no-deps mesh-tensorflow==0.1.21``).

Paths:
  * ``session``: ``mtf.Lowering`` in a v1 graph, ``sess.run([loss,
    train_op], feed_dict)`` per step -- what the original ran;
  * ``original``: the session path on mesh_tensorflow, if importable;
  * ``trainstep``: ``mesh_tf.training.TrainStep`` (one ``tf.function``),
    with TF's pools set to the Sessions' 1 intra-op and 2 inter-op threads;
  * ``session_malloc`` / ``original_bfc``: the session / original path
    with TF's host allocator switched (``TF_CPU_ALLOCATOR_USE_BFC``:
    ``import mesh_tf`` asks for TF's BFC allocator, see
    ``mesh_tf.startup.host_allocator``; the original leaves ``malloc``), to show
    what the allocator alone is worth (not run unless asked for);
  * ``session_unfused``: the session path with
    ``PlacementMeshImpl(fuse=False)`` (not run unless asked for).
Reported per run: lowering (building the TF graph), first step, steady step
(median wall and process-CPU time of the later steps), peak RSS, whether
TF's eager runtime had started before the Session was made (``eager``), and
the load average; then per path the medians, and the steady-step ratios of
``session`` to every other path, per round and their median.

The default mode runs every path in its OWN process (a program of its own,
as a user runs it: its own TF runtime, thread pools and peak RSS),
``--rounds`` times in turn, the order rotating each round, so that each
round's ratio compares runs made close together on a shared machine.  A
Session program's ``ConfigProto`` (``intra_op_parallelism_threads=1``) sizes
TF's process-wide intra-op pool only if nothing has started TF's eager
runtime before the Session: mesh-tf lowering defines its fused segments in
the graph's own function library (``tf_private.graph_function``), so it
does not, and ``eager`` reads False for both Session paths.

``--interleaved`` runs the paths' steps in turn in ONE process per layer
count instead: once in TF2 with the v1 graphs built under
``tf.Graph().as_default()`` (TrainStep included), once after
``tf.disable_v2_behavior()`` as Mesh TF programs run (no TrainStep).  Its
ratios share the machine's load step by step, but its paths also share one
TF runtime: its thread pools are sized by whatever path starts them first
(TrainStep's eager runtime: one intra-op thread per core), so it does not
compare the programs as their own users run them.  ``--session-threads``
sizes TF's process-wide pools as the Sessions ask (1 intra-op, 2 inter-op
threads) before anything else, in every process.

Reproduce:
  python benchmarks/mtf_port.py                  # 1, 8 and 32 layers
  python benchmarks/mtf_port.py --layers 1 8 --rounds 5 --steps 20
  python benchmarks/mtf_port.py --layers 32 --rounds 2 --steps 6
  python benchmarks/mtf_port.py --interleaved --layers 1 8 --steps 20
  python benchmarks/mtf_port.py --interleaved --tf2-only --paths session \
      trainstep --layers 32 --steps 6
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "port_from_mesh_tensorflow.py")
IMPORT_LINE = "import mesh_tf as mtf"
#: Paths that run another path with TF's host allocator switched.
ALLOCATOR_PATHS = {"session_malloc": "false", "original_bfc": "true"}


def _peak_rss_mib():
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _eager_started():
  """Whether TF's eager runtime (and with it the process-wide intra-op
  pool, one thread per core) has started; None if this TF cannot say."""
  try:
    from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel
    return bool(context.context()._initialized)  # pylint: disable=protected-access
  except (ImportError, AttributeError):
    return None


def _threads():
  try:
    return len(os.listdir("/proc/self/task"))
  except OSError:
    return None


def _timed_steps(step, steps):
  """Runs ``step`` ``steps`` times; returns (wall s, process CPU s, losses)
  per step."""
  times, cpu, losses = [], [], []
  for _ in range(steps):
    c1, t1 = time.process_time(), time.perf_counter()
    losses.append(float(step()))
    times.append(time.perf_counter() - t1)
    cpu.append(time.process_time() - c1)
  return times, cpu, losses


def _summary(lowering_s, times, cpu, losses, eager_at_session):
  return dict(lowering_s=lowering_s, first_s=times[0],
              steady_ms=1000 * statistics.median(times[1:]),
              cpu_ms=1000 * statistics.median(cpu[1:]),
              losses=losses[:3] + losses[-1:], peak_rss_mib=_peak_rss_mib(),
              eager_at_session=eager_at_session, threads=_threads())


def _shim_original():
  """What mesh_tensorflow 0.1.21 needs to import on TF 2.21: a stand-in
  for gin-config's decorators (not installed), ``tf.compat.v1.estimator``'s
  two hook base classes (TF removed estimator), and TF's moved
  ``register_tensor_conversion_function``.  None of it changes a result."""
  gin = types.ModuleType("gin")

  def configurable(*args, **kwargs):
    if len(args) == 1 and callable(args[0]) and not kwargs:
      return args[0]
    return lambda f: f
  gin.configurable = gin.register = configurable
  gin.external_configurable = lambda f, *a, **k: f
  gin.REQUIRED = object()
  gin.query_parameter = lambda name: None
  gin.tf = types.ModuleType("gin.tf")
  sys.modules.setdefault("gin", gin)
  sys.modules.setdefault("gin.tf", gin.tf)
  import tensorflow.compat.v1 as v1  # pylint: disable=import-outside-toplevel
  from tensorflow.python.framework import ops as tf_ops  # pylint: disable=import-outside-toplevel
  from tensorflow.python.framework import tensor_conversion_registry  # pylint: disable=import-outside-toplevel
  if not hasattr(v1, "estimator"):
    v1.estimator = types.SimpleNamespace(
        SessionRunHook=v1.train.SessionRunHook,
        CheckpointSaverListener=v1.train.CheckpointSaverListener,
        ModeKeys=types.SimpleNamespace(TRAIN="train", EVAL="eval",
                                       PREDICT="infer"))
  if not hasattr(tf_ops, "register_tensor_conversion_function"):
    tf_ops.register_tensor_conversion_function = (
        tensor_conversion_registry.register_tensor_conversion_function)


def _match_session_threads():
  """Makes TF's process-wide intra-op pool the Sessions' 1 thread, as if
  the program had made its Session before lowering (see the module doc)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  tf.config.threading.set_intra_op_parallelism_threads(1)
  tf.config.threading.set_inter_op_parallelism_threads(2)


def _load_example(original):
  """The example as a module, on mesh_tf or on the original."""
  source = open(EXAMPLE).read()
  if original:
    _shim_original()
    source = source.replace(IMPORT_LINE, "import mesh_tensorflow as mtf", 1)
  module = types.ModuleType("port_example")
  module.__file__ = EXAMPLE
  exec(compile(source, EXAMPLE, "exec"), module.__dict__)  # pylint: disable=exec-used
  return module


def _hparams(example, layers):
  return example.parse_args(["--model_dir", "/nonexistent", "--num_layers",
                             str(layers), "--optimizer", "sgd"])


def run_session(layers, steps, original=False, fuse=True,
                session_threads=False):
  if not original:
    import mesh_tf  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
  if session_threads:
    _match_session_threads()
  example = _load_example(original)
  tf = example.tf
  tf.disable_v2_behavior()
  hp = _hparams(example, layers)
  devices = ["/cpu:%d" % i for i in range(hp.num_devices)]
  if not fuse:
    _unfused(example)
  t0 = time.perf_counter()
  model = example.build(hp, devices)
  lowering_s = time.perf_counter() - t0
  inputs, targets = example.synthetic_batch(hp.batch, hp.length, hp.vocab)
  feed = {model["inputs"]: inputs, model["targets"]: targets}
  config = tf.ConfigProto(device_count={"CPU": hp.num_devices},
                          inter_op_parallelism_threads=2,
                          intra_op_parallelism_threads=1)
  eager_at_session = _eager_started()
  with tf.Session(config=config) as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(tf.local_variables_initializer())
    sess.run(model["lowering"].copy_masters_to_slices())
    fetches = [model["loss"], model["train_op"]]
    times, cpu, losses = _timed_steps(
        lambda: sess.run(fetches, feed_dict=feed)[0], steps)
  return _summary(lowering_s, times, cpu, losses, eager_at_session)


def run_trainstep(layers, steps, session_threads=False):
  import mesh_tf as mtf  # pylint: disable=import-outside-toplevel
  if session_threads:
    _match_session_threads()
  mtf.set_logical_cpu_devices(8)
  from mesh_tf import training  # pylint: disable=import-outside-toplevel
  example = _load_example(False)
  hp = _hparams(example, layers)
  np = example.np
  inputs, targets = example.synthetic_batch(hp.batch, hp.length, hp.vocab)
  t0 = time.perf_counter()
  example.tf.set_random_seed(hp.seed)
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "my_mesh")
  # Arrays stand in for the placeholders: TrainStep feeds its arguments.
  _, loss = example.transformer_lm(mesh, np.zeros_like(inputs),
                                   np.zeros_like(targets), hp)
  imports = [op.outputs[0] for op in graph.operations
             if isinstance(op, mtf.ImportOperation)]
  impl = mtf.PlacementMeshImpl(hp.mesh_shape, hp.layout,
                               mtf.logical_cpu_devices(8))
  step = training.TrainStep(graph, mesh, loss, imports, impl,
                            mtf.optimize.SgdOptimizer(hp.learning_rate))
  step.concrete_function()
  lowering_s = time.perf_counter() - t0
  times, cpu, losses = _timed_steps(lambda: step(inputs, targets), steps)
  return _summary(lowering_s, times, cpu, losses, None)


def _unfused(example):
  """Makes the example's PlacementMeshImpl lower unfused."""
  import mesh_tf  # pylint: disable=import-outside-toplevel
  real = mesh_tf.compat.placement_mesh_impl.PlacementMeshImpl

  def unfused(*args, **kwargs):
    return real(*args, fuse=False, **kwargs)
  view = types.ModuleType("mesh_tf_unfused")  # mesh_tf, one name changed
  view.__getattr__ = lambda name: getattr(mesh_tf, name)
  view.placement_mesh_impl = types.SimpleNamespace(PlacementMeshImpl=unfused)
  example.mtf = view


def _session_stepper(example, hp, original):
  """Builds the session path in a fresh tf.Graph; returns a step function."""
  tf = example.tf
  graph = tf.Graph()
  with graph.as_default():
    model = example.build(hp, ["/cpu:%d" % i for i in range(hp.num_devices)])
    init = [tf.global_variables_initializer(),
            tf.local_variables_initializer()]
    copy = model["lowering"].copy_masters_to_slices()
  config = tf.ConfigProto(device_count={"CPU": hp.num_devices},
                          inter_op_parallelism_threads=2,
                          intra_op_parallelism_threads=1)
  sess = tf.Session(graph=graph, config=config)
  sess.run(init)
  sess.run(copy)
  inputs, targets = example.synthetic_batch(hp.batch, hp.length, hp.vocab)
  feed = {model["inputs"]: inputs, model["targets"]: targets}
  fetches = [model["loss"], model["train_op"]]
  del original
  return lambda: sess.run(fetches, feed_dict=feed)[0]


def run_interleaved(layers, steps, paths, v1=False, session_threads=False):
  """All ``paths`` in ONE process, their steps taken in turn, so that every
  path sees the same machine load; returns per-path medians."""
  import mesh_tf as mtf  # pylint: disable=import-outside-toplevel
  if session_threads:
    _match_session_threads()
  if v1:  # as Mesh TF programs run: TF1 behaviour, no eager TrainStep
    import tensorflow.compat.v1 as tf1  # pylint: disable=import-outside-toplevel
    tf1.disable_v2_behavior()
    paths = [p for p in paths if p != "trainstep"]
  else:
    mtf.set_logical_cpu_devices(8)
  from mesh_tf import training  # pylint: disable=import-outside-toplevel
  steppers, first_s, ready = {}, {}, {}
  for path in paths:
    c0, t0 = time.process_time(), time.perf_counter()
    if path == "trainstep":
      example = _load_example(False)
      hp = _hparams(example, layers)
      inputs, targets = example.synthetic_batch(hp.batch, hp.length, hp.vocab)
      graph = mtf.Graph()
      mesh = mtf.Mesh(graph, "my_mesh")
      _, loss = example.transformer_lm(mesh, example.np.zeros_like(inputs),
                                       example.np.zeros_like(targets), hp)
      imports = [op.outputs[0] for op in graph.operations
                 if isinstance(op, mtf.ImportOperation)]
      impl = mtf.PlacementMeshImpl(hp.mesh_shape, hp.layout,
                                   mtf.logical_cpu_devices(8))
      step = training.TrainStep(graph, mesh, loss, imports, impl,
                                mtf.optimize.SgdOptimizer(hp.learning_rate))
      steppers[path] = (lambda s=step, a=inputs, b=targets: s(a, b))
    else:
      example = _load_example(path == "original")
      if path == "session_unfused":
        _unfused(example)
      steppers[path] = _session_stepper(example, _hparams(example, layers),
                                        path == "original")
    first = time.perf_counter()
    steppers[path]()
    first_s[path] = time.perf_counter() - first
    # Building and the first step: wall and process CPU time (lowering
    # runs at build for a Session, at the first step for TrainStep).
    ready[path] = (time.perf_counter() - t0, time.process_time() - c0)
    print(f"# {path}: built in {first - t0:.1f} s, first step "
          f"{first_s[path]:.1f} s", file=sys.stderr)
  times = {p: [] for p in paths}
  cpu = {p: [] for p in paths}  # the process's CPU time: less load-bound
  for _ in range(steps):
    for path in paths:
      c1, t1 = time.process_time(), time.perf_counter()
      steppers[path]()
      times[path].append(time.perf_counter() - t1)
      cpu[path].append(time.process_time() - c1)
  return {"wall": {p: 1000 * statistics.median(ts) for p, ts in times.items()},
          "cpu": {p: 1000 * statistics.median(ts) for p, ts in cpu.items()},
          "first_s": first_s, "ready_s": ready}


def _worker(path, layers, steps, session_threads=False):
  if path == "trainstep":
    return run_trainstep(layers, steps, session_threads)
  return run_session(layers, steps, original=path.startswith("original"),
                     fuse=path != "session_unfused",
                     session_threads=session_threads)


def _spawn(path, layers, steps, paths=(), session_threads=False):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  if path in ALLOCATOR_PATHS:
    env["TF_CPU_ALLOCATOR_USE_BFC"] = ALLOCATOR_PATHS[path]
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  extra = ["--paths", *paths] if paths else []
  if session_threads:
    extra.append("--session-threads")
  proc = subprocess.run(
      [sys.executable, __file__, "--worker", path, "--layers", str(layers),
       "--steps", str(steps), *extra], capture_output=True, text=True,
      env=env, check=False)
  lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
  if proc.returncode or not lines:
    return {"error": (proc.stderr or proc.stdout)[-600:]}
  return json.loads(lines[-1])


def _original_available():
  import importlib.util  # pylint: disable=import-outside-toplevel
  return importlib.util.find_spec("mesh_tensorflow") is not None


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--layers", type=int, nargs="+", default=[1, 8, 32])
  parser.add_argument("--steps", type=int, default=12)
  parser.add_argument("--rounds", type=int, default=3,
                      help="default mode: runs of each path, each in its own "
                      "process, taken in turn")
  parser.add_argument("--paths", nargs="+",
                      default=["session", "original", "trainstep"],
                      help="session, original, trainstep, session_unfused, "
                      "session_malloc, original_bfc")
  parser.add_argument("--interleaved", action="store_true",
                      help="run the session, trainstep (and original) steps "
                      "in turn in one process per layer count, so that the "
                      "steady-step ratios share the machine's load")
  parser.add_argument("--session-threads", action="store_true",
                      help="size TF's process-wide intra-op pool from the "
                      "Sessions' config (1 thread) before lowering, as the "
                      "original gets it (see the module doc)")
  parser.add_argument("--tf2-only", action="store_true",
                      help="--interleaved: skip the disable_v2 process (it "
                      "runs no TrainStep)")
  parser.add_argument("--worker", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker in ("interleaved", "interleaved_v1"):
    print(json.dumps(run_interleaved(args.layers[0], args.steps, args.paths,
                                     v1=args.worker == "interleaved_v1",
                                     session_threads=args.session_threads)))
    return
  if args.worker:
    print(json.dumps(_worker(args.worker, args.layers[0], args.steps,
                             args.session_threads)))
    return
  paths = list(args.paths)
  if (any(p.startswith("original") for p in paths)
      and not _original_available()):
    print("mesh_tensorflow is not installed: no 'original' column "
          "(pip install --no-deps mesh-tensorflow==0.1.21)")
    paths = [p for p in paths if not p.startswith("original")]
  if args.interleaved:
    print("steady step (median ms of wall and of process CPU time), steps "
          "taken in turn in one process")
    for layers in args.layers:
      modes = ("interleaved",) if args.tf2_only else ("interleaved",
                                                      "interleaved_v1")
      for mode in modes:
        r = _spawn(mode, layers, args.steps, paths, args.session_threads)
        if "error" in r:
          print(f"{layers:>6} {mode} failed: {r['error']}")
          continue
        label = "TF2 graph" if mode == "interleaved" else "disable_v2"
        for kind in ("wall", "cpu"):
          t = r[kind]
          cells = "  ".join(f"{p} {v:.1f}" for p, v in t.items())
          ratios = "  ".join(f"session/{p} {t['session'] / t[p]:.2f}x"
                             for p in t if p != "session")
          print(f"{layers:>6} layers, {label}, {kind}: {cells}  |  {ratios}")
        print(f"{layers:>6} layers, {label}, first step s: " + "  ".join(
            f"{p} {v:.1f}" for p, v in r["first_s"].items()))
        print(f"{layers:>6} layers, {label}, build + first step s (wall/"
              "cpu): " + "  ".join(f"{p} {w:.1f}/{c:.1f}"
                                   for p, (w, c) in r["ready_s"].items()))
    return
  for layers in args.layers:
    _alternate(layers, args.steps, args.rounds, paths, args.session_threads)


def _uptime():
  try:
    return open("/proc/loadavg").read().split()[0]
  except OSError:
    return "?"


def _alternate(layers, steps, rounds, paths, session_threads):
  """The default mode: every path in its own process, ``rounds`` times,
  in turn (the order rotating each round); prints every run, then per
  path the medians and per round the steady-step ratios of ``session``
  to each other path, with their median."""
  print(f"{'layers':>6} {'round':>5} {'path':<16} {'lowering s':>10} "
        f"{'first s':>8} {'steady ms':>10} {'cpu ms':>8} {'peak MiB':>9} "
        f"{'eager':>5} {'load':>5}  losses")
  runs = {p: [] for p in paths}
  ratios = {p: {"wall": [], "cpu": []} for p in paths if p != "session"}
  for k in range(rounds):
    order = paths[k % len(paths):] + paths[:k % len(paths)]
    this = {}
    for path in order:
      # TrainStep has no Session to size TF's pools: it gets the Sessions'
      # 1 intra-op and 2 inter-op threads, so that all paths run alike.
      r = _spawn(path, layers, steps,
                 session_threads=session_threads or path == "trainstep")
      if "error" in r:
        print(f"{layers:>6} {k:>5} {path:<16} failed: {r['error']}")
        continue
      this[path] = r
      runs[path].append(r)
      print(f"{layers:>6} {k:>5} {path:<16} {r['lowering_s']:>10.2f} "
            f"{r['first_s']:>8.2f} {r['steady_ms']:>10.1f} "
            f"{r['cpu_ms']:>8.1f} {r['peak_rss_mib']:>9.0f} "
            f"{str(r['eager_at_session'])[:5]:>5} {_uptime():>5}  "
            + " ".join(f"{v:.3f}" for v in r["losses"]), flush=True)
    if "session" in this:
      for other, r in this.items():
        if other != "session":
          for kind, field in (("wall", "steady_ms"), ("cpu", "cpu_ms")):
            ratios[other][kind].append(this["session"][field] / r[field])
  med = statistics.median
  for path, rs in runs.items():
    if rs:
      print(f"{layers:>6} median {path:<16} lowering "
            f"{med(r['lowering_s'] for r in rs):.2f} s, first "
            f"{med(r['first_s'] for r in rs):.2f} s, steady "
            f"{med(r['steady_ms'] for r in rs):.1f} ms (cpu "
            f"{med(r['cpu_ms'] for r in rs):.1f}), peak "
            f"{max(r['peak_rss_mib'] for r in rs):.0f} MiB ({len(rs)} runs)")
  for other, rs in ratios.items():
    if rs["wall"]:
      print(f"{layers:>6} steady step session / {other}: wall "
            f"{med(rs['wall']):.2f}x (rounds "
            + " ".join(f"{v:.2f}" for v in rs["wall"]) + "), cpu "
            f"{med(rs['cpu']):.2f}x (rounds "
            + " ".join(f"{v:.2f}" for v in rs["cpu"]) + ")", flush=True)


if __name__ == "__main__":
  main()
