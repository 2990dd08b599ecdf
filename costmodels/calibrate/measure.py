"""Micro-benchmarks on real devices, through the real lowering.

Every timing runs the code a lowered step runs: the collectives of
:class:`mesh_tf.PlacementMeshImpl` (``allreduce``, ``allconcat``,
``allsplit``, ``alltoall``, ``shift_by_n_processors``) and its slicewise
kernels, fused as in a step, inside one ``tf.function`` per benchmark.  A
benchmark chains ``reps`` repetitions of one *rep*:

* a collective, then one small slicewise kernel that restores the slice
  shape (the kernel's price, from the compute fit, is taken off the rep
  when fitting, as the cost model prices that record on its own);
* an einsum as dense layers and attention issue them (FLOPs), an
  elementwise multiply (bytes), or
  a one-element multiply (the fixed cost of a kernel inside a fused
  segment), on one device alone and on every device at once (so that
  shared compute shows).

And whole training steps of a small reference graph at two depths
(:func:`reference_steps`): their difference over the difference in compute
records is what one record of a lowered step costs to launch, with the
per-segment calls, the TF ops an einsum or a reduction really issues and the
executor's scheduling over the devices included -- which one kernel in a
long fused chain does not show.

A rep's time is ``(median call time - empty call time) / reps``.

TensorFlow is imported only inside the functions that touch devices, so
that ``costmodels`` stays TF-free at import.  Run as a module (``python -m
costmodels.calibrate.measure``), it sets up the devices of one process
(logical CPU devices are fixed per process), measures, and writes one JSON
event per line on stdout: ``plan``, ``progress``, ``info``, ``sample``,
``error`` and ``done``; :func:`costmodels.calibrate.calibrate` reads them.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time
from typing import NamedTuple, Tuple

from costmodels.calibrate.fit import CalibrationError, Sample

COLLECTIVES = ("allreduce", "allgather", "alltoall", "permute", "allsplit")


class Plan(NamedTuple):
  """What to measure.

  Attributes:
    meshes: mesh strings whose every axis is measured.
    collective_bytes: input bytes per participant of each collective.
    einsums: ``(equation, input shape, weight shape)`` of the einsum
      benchmarks, in the forms the lowering of dense layers
      (``abc,cd->abd``) and attention (``abcd,abde->abce``) issues, each
      chainable (its output has the input's shape).
    elementwise_bytes: bytes of each elementwise benchmark's slice.
    dtypes: matmul dtypes (the first is the one models use).
    calls: timed calls per benchmark (their median is kept).
  """
  meshes: Tuple[str, ...]
  collective_bytes: Tuple[int, ...]
  einsums: tuple
  elementwise_bytes: Tuple[int, ...]
  dtypes: Tuple[str, ...]
  calls: int

  @property
  def num_benchmarks(self):
    from mesh_tf.core import dims as dims_lib
    axes = sum(len(dims_lib.convert_to_shape(m).dims) for m in self.meshes)
    return (axes * len(COLLECTIVES) * len(self.collective_bytes)
            + 2 * (len(self.einsums) + len(self.elementwise_bytes) + 1)
            + len(self.dtypes) - 1 + 3)


def make_plan(meshes, quick=False, dtypes=("float32",)):
  """The default plan: about 60 s on 8 logical CPU devices of a 2-core
  machine, ``quick`` about 20 s (sizes straddle the all-reduce's switch
  from per-device sums to reduce + broadcast at 256 KiB)."""
  dense = [("abc,cd->abd", (16, 32, k), (k, k)) for k in (64, 128, 256)]
  attention = [("abcd,abde->abce", (16, 8, s, 16), (16, 8, 16, 16))
               for s in (32, 128)]
  # Forms whose operands TF must transpose first, as backward passes and
  # per-expert layers issue them: measured several times slower per FLOP
  # than the two above at these sizes.
  transposed = [("abcd,abce->abed", (16, 8, 32, 16), (16, 8, 32, 32)),
                ("abcd,bed->abce", (16, 8, 4, 128), (8, 128, 128))]
  if quick:
    return Plan(tuple(meshes), (4096, 131072, 524288, 2097152),
                tuple(dense[::2] + attention[:1] + transposed[1:]),
                (262144, 2097152), tuple(dtypes)[:1], 5)
  return Plan(tuple(meshes), (2048, 16384, 131072, 393216, 1048576, 4194304),
              tuple(dense + attention + transposed),
              (65536, 524288, 4194304), tuple(dtypes), 9)


def einsum_flops(eq, xs, ws):
  """``2 * prod(size of every letter)`` of a two-input einsum."""
  ins, _ = eq.split("->")
  sizes = {}
  for word, shape in zip(ins.split(","), (xs, ws)):
    sizes.update(zip(word, shape))
  return 2 * math.prod(sizes.values())


def _tf():
  from mesh_tf.lowering.lazy_tf import tf  # pylint: disable=import-outside-toplevel
  return tf


def process_of(device):
  """The ``/job:x/replica:r/task:k`` part of a device name ('' if local)."""
  device = str(device)
  cut = device.find("/device:")
  prefix = device[:cut] if cut >= 0 else ""
  return prefix if "/task:" in prefix else ""


def axis_link_name(mesh_shape, axis, devices):
  """``"device"`` if every group of ``axis`` stays in one process,
  ``"process"`` if each member of a group is in another process, ``""``
  (mixed) otherwise."""
  from mesh_tf.core import dims as dims_lib  # pylint: disable=import-outside-toplevel
  shape = dims_lib.convert_to_shape(mesh_shape)
  sizes = [d.size for d in shape.dims]
  k = shape.dimension_names.index(axis)
  stride = math.prod(sizes[k + 1:])
  groups = {}
  for pnum in range(shape.size):
    # Processors that differ only in their coordinate on ``axis``.
    key = pnum - ((pnum // stride) % sizes[k]) * stride
    groups.setdefault(key, []).append(pnum)
  procs = [[process_of(devices[q]) for q in g] for g in groups.values()]
  if all(len(set(g)) == 1 for g in procs):
    return "device"
  if all(len(set(g)) == len(g) for g in procs):
    return "process"
  return ""


class _Bench:
  """Times chained reps of one kind of work on one device list."""

  def __init__(self, devices, calls, sync):
    self.devices, self.calls, self.sync = list(devices), calls, sync

  def _call(self, fn):
    t0 = time.perf_counter()
    self.sync(fn())
    return time.perf_counter() - t0

  def per_rep(self, impl, x, rep, reps):
    """Seconds of one ``rep(x) -> x`` in a chain of ``reps``.

    The chain and an empty call (that only reads the inputs and returns as
    many tensors) are called in turn, and the median of their paired
    differences is kept: interleaving puts a burst of other work on both
    of a pair, and the median (not the minimum) is the statistic the step
    benchmark reports, so that calibration and steps see the same machine
    even while it is shared.
    """
    tf = _tf()

    def chain():
      y = x
      for _ in range(reps):
        y = rep(y)
      return list(y.tensor_list)

    def empty():
      return [tf.identity(t) for t in x.tensor_list]
    fns = [tf.function(chain, autograph=False),
           tf.function(empty, autograph=False)]
    for f in fns:
      self._call(f)  # traces, optimises and runs once
    diffs = []
    for _ in range(self.calls):
      t = [self._call(f) for f in fns]
      diffs.append(t[0] - t[1])
    return max(statistics.median(diffs), 1e-9) / reps


def _variables(impl, slice_shape, dtype, ones=False):
  """A LaidOutTensor reading one variable per device (zeros or ones)."""
  from mesh_tf.lowering.mesh_impl import LaidOutTensor  # pylint: disable=import-outside-toplevel
  tf = _tf()
  vs = []
  for d in impl.devices:
    with tf.device(d):
      init = (tf.ones if ones else tf.zeros)(slice_shape, dtype)
      vs.append(tf.Variable(init, trainable=False))

  class _Reader(LaidOutTensor):
    __slots__ = ()

    @property
    def tensor_list(self):
      return [v.value() for v in vs]
  return _Reader(slice_shape, dtype)


def _halve(impl, x):
  """A cheap real slicewise kernel on every device: ``x * x``.  (Not a
  multiply by a constant: grappler folds a chain of those into one.)"""
  return impl.slicewise(lambda t: t * t, x, slice_shape=x.slice_shape)


def _reps_for(nbytes):
  return 6 if nbytes <= 131072 else 3 if nbytes <= 1048576 else 2


def _collective_rep(impl, kind, axis, m, w):
  """The rep of collective ``kind`` over ``axis`` on ``[m, w]`` slices, and
  the (flops, bytes) of its shape-restoring kernel."""
  tf = _tf()
  p = impl.shape.dims[impl.shape.index(axis)].size
  n_el = m * w
  if kind == "allreduce":
    def rep(x):
      return _halve(impl, impl.allreduce(x, [axis]))
    return rep, (n_el, 2 * n_el)
  if kind == "allgather":
    def rep(x):
      y = impl.allconcat(x, axis, 0)
      return impl.slicewise(lambda t: t[:m], y, slice_shape=(m, w), flops=0)
    return rep, (0, (p + 1) * n_el)
  if kind == "alltoall":
    def rep(x):
      y = impl.alltoall(x, axis, 0, 1)
      return impl.slicewise(lambda t: tf.reshape(t, [m, w]), y,
                            slice_shape=(m, w), flops=0)
    return rep, (0, 2 * n_el)
  if kind == "permute":
    def rep(x):
      return _halve(impl, impl.shift_by_n_processors(x, axis, 1, True))
    return rep, (n_el, 2 * n_el)
  if kind == "allsplit":
    def rep(x):
      y = impl.allsplit(x, axis, 0)
      return impl.slicewise(lambda t: tf.tile(t, [p, 1]), y,
                            slice_shape=(m, w), flops=0)
    return rep, (0, (1 + 1 / p) * n_el)
  raise CalibrationError(f"unknown collective {kind!r}; use one of "
                         f"{COLLECTIVES}")


def _slice_shape(nbytes, itemsize, p):
  """``[m, w]`` with ``m * w * itemsize == nbytes`` (about) and ``m`` a
  multiple of ``p``, as square as it allows."""
  n = max(p, nbytes // itemsize)
  w = max(1, 2 ** int(math.log2(math.sqrt(n))))
  m = max(p, (n // w) // p * p)
  return m, w


def run(plan, devices, emit, sync=None):
  """Runs ``plan`` on ``devices`` (TF device names); returns Samples.

  ``emit(event)`` receives ``progress`` events (dicts) as benchmarks end.

  Raises:
    CalibrationError: if a mesh's size differs from the device count.
  """
  from mesh_tf.core import dims as dims_lib  # pylint: disable=import-outside-toplevel
  from mesh_tf.lowering.placement import PlacementMeshImpl  # pylint: disable=import-outside-toplevel
  sync = sync or (lambda out: None)
  bench = _Bench(devices, plan.calls, sync)
  samples, done = [], [0]

  def note(label, sample):
    samples.append(sample)
    done[0] += 1
    emit({"event": "progress", "done": done[0],
          "total": plan.num_benchmarks, "label": label})

  n = len(devices)
  dtype = plan.dtypes[0]
  itemsize = 4 if dtype == "float32" else 2 if dtype in (
      "bfloat16", "float16") else 8
  for mesh in plan.meshes:
    shape = dims_lib.convert_to_shape(mesh)
    if shape.size != n:
      raise CalibrationError(
          f"mesh {shape!r} has {shape.size} processors but {n} devices are "
          f"measured; give meshes of {n} processors (e.g. 'x:{n}')")
  # Compute first: the collectives' shape-restoring kernels are priced by it.
  everyone = PlacementMeshImpl(f"x:{n}", "", devices)
  alone = PlacementMeshImpl("x:1", "", devices[:1])
  for impl, group in ((alone, 1), (everyone, n)):
    x = _variables(impl, (1,), dtype)
    t = bench.per_rep(impl, x, lambda y, impl=impl: _halve(impl, y), 24)
    note(f"kernel launch, {group} device(s)",
         Sample("launch", "", group, 2 * itemsize, 1.0, t, dtype))
    for eq, xs, ws in plan.einsums:
      a = _variables(impl, xs, dtype)
      b = _variables(impl, ws, dtype)
      flops = einsum_flops(eq, xs, ws)
      reps = 6 if flops <= 2e7 else 2

      def mm(y, impl=impl, b=b, eq=eq, xs=xs, flops=flops):
        return impl.slicewise(lambda u, v: _tf().einsum(eq, u, v), y, b,
                              slice_shape=xs, flops=flops)
      t = bench.per_rep(impl, a, mm, reps)
      nbytes = (2 * math.prod(xs) + math.prod(ws)) * itemsize
      note(f"einsum {eq} {'x'.join(map(str, xs))} {dtype}, {group} "
           "device(s)", Sample("matmul", "", group, nbytes, float(flops), t,
                               dtype))
    for nbytes in plan.elementwise_bytes:
      x = _variables(impl, (nbytes // itemsize,), dtype)
      t = bench.per_rep(impl, x, lambda y, impl=impl: _halve(impl, y),
                        _reps_for(nbytes) * 2)
      note(f"elementwise {nbytes // 1024} KiB, {group} device(s)",
           Sample("elementwise", "", group, 2 * nbytes, nbytes // itemsize,
                  t, dtype))
  for other in plan.dtypes[1:]:
    eq, xs, ws = plan.einsums[-1]
    a = _variables(alone, xs, other)
    b = _variables(alone, ws, other)
    flops = einsum_flops(eq, xs, ws)
    def mm1(y, b=b, eq=eq, xs=xs, flops=flops):
      return alone.slicewise(lambda u, v: _tf().einsum(eq, u, v), y, b,
                             slice_shape=xs, flops=flops)
    t = bench.per_rep(alone, a, mm1, 2)
    note(f"einsum {eq} {other}, 1 device",
         Sample("matmul", "", 1, 0, float(flops), t, other))
  for s in reference_steps(devices, 3 * plan.calls):
    note(f"reference step, {int(s.flops)} records", s)
  for mesh in plan.meshes:
    impl = PlacementMeshImpl(mesh, "", devices)
    for axis in impl.shape.dims:
      link = axis_link_name(impl.shape, axis.name, devices)
      for kind in COLLECTIVES:
        for nbytes in plan.collective_bytes:
          m, w = _slice_shape(nbytes, itemsize, axis.size)
          x = _variables(impl, (m, w), dtype)
          rep, (cflops, cbytes) = _collective_rep(impl, kind, axis.name, m, w)
          t = bench.per_rep(impl, x, rep, _reps_for(nbytes))
          note(f"{kind} {axis.name}={axis.size} {m * w * itemsize // 1024} "
               f"KiB ({mesh})",
               Sample(kind, axis.name, axis.size, m * w * itemsize,
                      float(cflops), t, dtype, link,
                      int(cbytes * itemsize)))
  return samples


def _reference_build(layers, width):
  """``build_fn`` of a small MLP-like training graph: einsums, relus,
  residual adds and a mean, as models are made of, at sizes where compute
  is negligible, so that its step time is what the lowering's records and
  kernels cost to launch."""
  def build(mesh):
    import mesh_tf as mtf  # pylint: disable=import-outside-toplevel
    x = mtf.import_tf_tensor(mesh, None, f"batch:8;d:{width}",
                             dtype="float32", name="x")
    h = x
    for i in range(layers):
      w = mtf.get_variable(mesh, f"w{i}", f"d:{width};e:{width}")
      v = mtf.get_variable(mesh, f"v{i}", f"e:{width};d:{width}")
      y = mtf.relu(mtf.einsum([h, w], f"batch:8;e:{width}"))
      h = h + mtf.einsum([y, v], f"batch:8;d:{width}")
    return mtf.reduce_mean(mtf.square(h)), [x]
  return build


def reference_step(devices, depth, width=8):
  """``(step, input, records)``: the reference graph of ``depth`` layers as
  a warmed-up training step replicated on ``devices``, its input value and
  its number of compute records (from the shape-only lowering)."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  import costmodels  # pylint: disable=import-outside-toplevel
  from mesh_tf import optimize, training  # pylint: disable=import-outside-toplevel
  n = len(devices)
  step = training.make_train_step(_reference_build(depth, width), f"x:{n}",
                                  "", devices, optimize.SgdOptimizer(0.01))
  x = np.zeros((8, width), np.float32)
  for _ in range(2):
    step(x).numpy()
  records = len(costmodels.trace_graph(step.graph, f"x:{n}", "").compute)
  return step, x, records


def reference_steps(devices, calls, depths=(1, 4, 8), width=8):
  """Samples ``step``: the median seconds of one training step of the
  reference graph (:func:`_reference_build`) at each depth, replicated on
  every device, with ``flops`` holding its number of compute records."""
  steps = [reference_step(devices, d, width) for d in depths]
  times = [[] for _ in steps]
  for _ in range(calls):
    for i, (step, x, _) in enumerate(steps):
      t0 = time.perf_counter()
      step(x).numpy()
      times[i].append(time.perf_counter() - t0)
  return [Sample("step", "", len(devices), 0, float(records),
                 statistics.median(t))
          for (_, _, records), t in zip(steps, times)]


def _devices_info(devices):
  """What calibration records about the measured devices."""
  tf = _tf()
  kinds = sorted({d.split("device:")[-1].split(":")[0] for d in devices})
  info = {"devices": list(devices), "device_types": kinds,
          "host_cores": os.cpu_count()}
  if "GPU" in kinds:
    try:
      details = tf.config.experimental.get_device_details(
          tf.config.list_physical_devices("GPU")[0])
      info["gpu_name"] = details.get("device_name", "gpu")
    except Exception:  # pylint: disable=broad-except
      info["gpu_name"] = "gpu"
    total = _gpu_memory_bytes()
    if total:
      info["memory_bytes_per_device"] = total
  return info


def _gpu_memory_bytes():
  """Memory of the first GPU from ``nvidia-smi`` (TF does not tell the
  total), or 0."""
  import subprocess  # pylint: disable=import-outside-toplevel
  try:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.total",
         "--format=csv,noheader,nounits"], capture_output=True, text=True,
        timeout=10, check=True).stdout
    return int(float(out.split()[0]) * 2**20)
  except (OSError, subprocess.SubprocessError, ValueError, IndexError):
    return 0


def _gpu_sync(out):
  _tf().test.experimental.sync_devices()


def main(argv=None):
  """Entry point of the measuring subprocess (see the module docstring)."""
  p = argparse.ArgumentParser(prog="python -m costmodels.calibrate.measure")
  src = p.add_mutually_exclusive_group(required=True)
  src.add_argument("--cpu-devices", type=int)
  src.add_argument("--gpus", type=int)
  src.add_argument("--cluster")
  p.add_argument("--devices-per-task", type=int)
  p.add_argument("--mesh", action="append", required=True)
  p.add_argument("--quick", action="store_true")
  p.add_argument("--dtype", action="append")
  p.add_argument("--timeout-s", type=float, default=30.0)
  args = p.parse_args(argv)

  def emit(event):
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()
  try:
    import mesh_tf as mtf  # pylint: disable=import-outside-toplevel
    # Each benchmark is its own tf.function, on purpose: no retracing notes.
    _tf().get_logger().setLevel("ERROR")
    sync = None
    if args.cpu_devices is not None:
      if args.cpu_devices < 1:
        raise CalibrationError(f"--cpu-devices {args.cpu_devices}: give at "
                               "least 1 logical CPU device")
      mtf.set_logical_cpu_devices(args.cpu_devices)
      devices = mtf.logical_cpu_devices(args.cpu_devices)
    elif args.gpus is not None:
      tf = _tf()
      have = tf.config.list_logical_devices("GPU")
      if args.gpus < 1 or args.gpus > len(have):
        raise CalibrationError(
            f"--gpus {args.gpus}: this machine has {len(have)} GPU(s); ask "
            f"for 1 to {len(have)}" if have else
            f"--gpus {args.gpus}: this machine has no GPU; calibrate "
            "logical CPU devices with --cpu-devices N instead")
      devices = [d.name for d in have[:args.gpus]]
      sync = _gpu_sync
    else:
      from mesh_tf import distributed as dist  # pylint: disable=import-outside-toplevel
      try:
        conn = dist.connect(args.cluster,
                            devices_per_task=args.devices_per_task,
                            timeout_s=args.timeout_s)
      except dist.ClusterError as e:
        raise CalibrationError(f"cluster {args.cluster!r} does not answer: "
                               f"{e}") from None
      devices = conn.mesh_devices(args.mesh[0])
    dtypes = tuple(args.dtype or ("float32",))
    if args.gpus is not None and "float16" not in dtypes:
      dtypes += ("float16",)  # GPUs' tensor cores take half precision too
    plan = make_plan(tuple(args.mesh), args.quick, dtypes)
    emit({"event": "plan", "total": plan.num_benchmarks})
    emit({"event": "info", **_devices_info(devices)})
    t0 = time.perf_counter()
    for s in run(plan, devices, emit, sync):
      emit({"event": "sample", **s._asdict()})
    emit({"event": "done", "seconds": time.perf_counter() - t0})
  except Exception as e:  # pylint: disable=broad-except
    from mesh_tf.core.errors import MtfError  # pylint: disable=import-outside-toplevel
    import traceback  # pylint: disable=import-outside-toplevel
    sys.stderr.write(traceback.format_exc())
    emit({"event": "error", "type": type(e).__name__,
          "typed": isinstance(e, MtfError), "message": str(e)})
    sys.stdout.flush()
    os._exit(3)  # pylint: disable=protected-access
  sys.stdout.flush()
  # Remote eager contexts can take seconds to tear down; the results are out.
  os._exit(0)  # pylint: disable=protected-access


if __name__ == "__main__":
  main()
