"""Runs the calibration probes (:mod:`costmodels.calibrate.probes`) on
real devices.

A probe's time is the median over ``calls`` of its paired difference
(chain call minus empty call, over its reps).

Run as a module (``python -m costmodels.calibrate.measure``), it sets up
the devices of one process (logical CPU devices are fixed per process),
measures, and writes one JSON event per line on stdout: ``plan``,
``progress``, ``info``, ``sample``, ``error`` and ``done``;
:func:`costmodels.calibrate.calibrate` reads them.  In a process that
already has its devices, :func:`prepare` gives the probes themselves, so
that a benchmark can time them interleaved with its own work.
"""

import argparse
import json
import math
import os
import random
import sys
import time
from typing import NamedTuple, Tuple

from costmodels.calibrate import model_steps as model_steps_lib
from costmodels.calibrate import probes as probes_lib
from costmodels.calibrate.timings import CalibrationError

COLLECTIVES = probes_lib.COLLECTIVES
einsum_flops = probes_lib.einsum_flops
reference_step = probes_lib.reference_step


class Plan(NamedTuple):
  """What to measure.

  Attributes:
    meshes: mesh strings whose every axis is measured.
    collective_bytes: input bytes per participant of each collective.
    einsums: ``(pattern, equation, input shape, weight shape)`` of the
      einsum probes, in forms models issue, per pattern of
      :func:`mesh_tf.lowering.einsum_kernels.einsum_pattern`.
    elementwise_bytes: bytes of each elementwise benchmark's slice.
    dtypes: matmul dtypes (the first is the one models use).
    calls: timed calls per benchmark (their median is kept).
    convs: ``(kind, (n, (depth, height, width), channels, filters,
      ksize))`` of the 3-D convolution probes (``conv`` and
      ``conv_filter``).
    overlap_bytes: all-reduce sizes of the overlap probes.
    overlap_compute_reps: einsum chain lengths run beside them.
    model_steps: small zoo models whose training steps price the fixed
      cost of a record in a step (:data:`model_steps_lib.MODEL_STEPS`).
    kernel_sizes: ``(batch, rows, cols)`` of the tiny matrix products
      (:data:`probes_lib.KERNEL_SIZES` or some of them).
    max_reps: the most reps of a probe's chain (0: no cap).
    mixed_steps: the models of ``model_steps`` also stepped mixed (see
      :func:`model_steps_lib.model_step_layouts`).  One is enough to tell
      a collective's cost in a step from a message's.
    step_depths: depths of the reference steps (at least two: the slope
      of their times over their records prices a record).
    split_steps: the models of ``model_steps`` also stepped with their
      hidden layer split over every device (see
      :func:`model_steps_lib.model_step_layouts`): every collective one
      the step waits for, over the whole mesh.
    data_steps: the models of ``model_steps`` also stepped data parallel
      (the full plan: all of them; see
      :func:`model_steps_lib.model_step_layouts`).
  """
  meshes: Tuple[str, ...]
  collective_bytes: Tuple[int, ...]
  einsums: tuple
  elementwise_bytes: Tuple[int, ...]
  dtypes: Tuple[str, ...]
  calls: int
  convs: tuple = ()
  overlap_bytes: Tuple[int, ...] = ()
  overlap_compute_reps: Tuple[int, ...] = ()
  model_steps: Tuple[str, ...] = ()
  kernel_sizes: tuple = probes_lib.KERNEL_SIZES
  max_reps: int = 0
  mixed_steps: Tuple[str, ...] = ()
  step_depths: Tuple[int, ...] = (1, 4, 8)
  split_steps: Tuple[str, ...] = ()
  data_steps: Tuple[str, ...] = ()

  @property
  def num_benchmarks(self):
    from mesh_tf.core import dims as dims_lib
    shapes = [dims_lib.convert_to_shape(m) for m in self.meshes]
    axes = sum(len(shape.dims) for shape in shapes)
    n = shapes[0].size if shapes else 1
    return (axes * (len(COLLECTIVES) * len(self.collective_bytes)
                    + 3 * len(self.overlap_bytes)
                    * len(self.overlap_compute_reps))
            + 2 * (len(self.einsums) + len(self.convs)
                   + len(self.elementwise_bytes) + 1)
            + len(self.dtypes) - 1 + len(self.step_depths) + sum(
                len(model_steps_lib.model_step_layouts(
                    m, n, m in self.mixed_steps, m in self.split_steps,
                    m in self.data_steps))
                for m in self.model_steps)
            + len(self.kernel_sizes))


def make_plan(meshes, quick=False, dtypes=("float32",)):
  """The default plan, or the ``quick`` one (collective sizes span 4 KiB
  to a few MiB a device; ``quick`` times the smallest and largest, of
  each convolution kernel a full shape and the two thin ones, the
  training steps of two of the small models and the wide MLP (the full
  plan: all five), only the Transformer's and the wide MLP's data
  parallel (the latter's megabyte gradients beside the former's kilobytes
  price a collective's bytes in a step), two reference steps, every other
  tiny product of
  :data:`probes_lib.KERNEL_SIZES`, and chains at most 2 reps, since
  tracing a probe's chain is most of what it costs).  On 8 logical CPU
  devices of a 2-core machine the default is meant for about 60 s and
  ``quick`` for about 20 s: ``mtf-layout calibrate --quick`` took 20.1 s
  of wall time (16 s measuring, the rest TensorFlow's start; 21-25 s
  on a loaded day; 20.9 s on a day TensorFlow's import alone took 4.8 s,
  against 22.2-22.6 s with a third collective size), 26.6 s
  before each replicated slice's initial value was computed once and the
  collectives of one size shared their input and empty call."""
  # Forms the zoo's dense layers, attention and their gradients issue.
  matmul = [("matmul", "abc,cd->abd", (16, 32, k), (k, k))
            for k in (64, 128, 256)] + [
                ("matmul", "abc,abd->cd", (16, 32, 64), (16, 32, 256))]
  batched = [("batched", "abcd,abde->abce", (16, 8, s, 16), (16, 8, 16, 16))
             for s in (32, 128)]
  transposed = [
      ("transposed", "abc,cde->adbe", (16, 32, 64), (64, 8, 16)),
      ("transposed", "abcd,ebd->ace", (16, 8, 32, 16), (64, 8, 16)),
      ("transposed", "abcd,ace->ebd", (16, 8, 32, 16), (16, 32, 64)),
      ("transposed", "abcd,bde->ace", (16, 8, 32, 16), (8, 16, 64)),
      ("transposed", "abcd,bed->abce", (16, 8, 4, 128), (8, 128, 128))]
  # Channels, filters and the output's width vary apart from the FLOPs,
  # down to one channel and a width of 2 (a layout that splits them leaves
  # that), so that the fit tells the bytes a convolution reads, and the
  # tile its kernel computes in (conv_tiles), from its FLOPs.
  cube = (16, 16, 16)
  convs = [(kind, shape) for kind in ("conv", "conv_filter")
           for shape in ((2, cube, 8, 8, 3), (4, cube, 4, 8, 3),
                         (1, cube, 1, 8, 3), (1, cube, 8, 1, 3),
                         (8, (4, 18, 18), 8, 8, 3), (8, (18, 18, 4), 8, 8, 3),
                         (4, (18, 18, 6), 8, 8, 3), (2, cube, 8, 2, 3))]
  # The quick plan's convolutions: of each kind, the full shape and the
  # three thin ones (a single input, a single output channel, an output two
  # columns wide), which price the thin-convolution regime (conv_tiles,
  # few): without the narrow one, a layout that splits the width over 8
  # devices was priced as fast as one that splits the depth, and ran 1.4x
  # its time.
  thin = [c for i, c in enumerate(convs) if i % 8 in (0, 2, 3, 5)]
  if quick:
    return Plan(tuple(meshes), (4096, 2097152),
                tuple(matmul[::2] + batched[:1] + transposed[::2]),
                (262144, 2097152), tuple(dtypes)[:1], 5, tuple(thin),
                (1048576,), (2,), ("transformer", "conv3d", "mlp_wide"),
                probes_lib.KERNEL_SIZES[::2], 2, ("transformer",), (1, 4),
                data_steps=("transformer", "mlp_wide"))
  return Plan(tuple(meshes), (2048, 16384, 131072, 393216, 1048576, 4194304),
              tuple(matmul + batched + transposed),
              (65536, 524288, 4194304, 16777216), tuple(dtypes), 9,
              tuple(convs),
              (262144, 1048576), (1, 3), tuple(model_steps_lib.MODEL_STEPS),
              mixed_steps=tuple(model_steps_lib.MODEL_STEPS),
              split_steps=("mlp", "transformer"),
              data_steps=tuple(model_steps_lib.MODEL_STEPS))


def _tf():
  from mesh_tf.lowering.lazy_tf import tf  # pylint: disable=import-outside-toplevel
  return tf


def process_of(device):
  """The ``/job:x/replica:r/task:k`` part of a device name ('' if local)."""
  device = str(device)
  cut = device.find("/device:")
  prefix = device[:cut] if cut >= 0 else ""
  return prefix if "/task:" in prefix else ""


def is_remote(device):
  """Whether ``device`` lives in another process (an ``mtf-worker``
  task), not this one's ``/job:localhost``."""
  return bool(process_of(device)) and "/job:localhost" not in str(device)


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


def prepare(plan, devices, sync=None):
  """Every probe of ``plan`` on ``devices`` (TF device names), prepared:
  compute (alone on the first device, then on all), the tiny matrix
  products of ``plan.kernel_sizes`` (on all), other dtypes,
  reference steps, then per mesh axis its collectives and overlap probes.
  ``sync(outputs)`` waits for a call's work (default
  :func:`default_sync` of ``devices``).

  Raises:
    CalibrationError: if a mesh's size differs from the device count.
  """
  from mesh_tf.core import dims as dims_lib  # pylint: disable=import-outside-toplevel
  from mesh_tf.lowering.placement import PlacementMeshImpl  # pylint: disable=import-outside-toplevel
  sync = sync or default_sync(devices)
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
  alone = PlacementMeshImpl("x:1", "", devices[:1])
  everyone = PlacementMeshImpl(f"x:{n}", "", devices)
  out = []
  for impl in (alone, everyone):
    out += probes_lib.compute_probes(impl, plan, dtype, itemsize, sync)
  out += probes_lib.kernel_probes(everyone, dtype, itemsize, sync,
                                  plan.kernel_sizes, plan.max_reps)
  out += [probes_lib.dtype_probe(alone, plan, other, sync)
          for other in plan.dtypes[1:]]
  out += probes_lib.step_probes(devices, plan.step_depths)
  out += model_steps_lib.model_step_probes(
      devices, plan.model_steps, plan.mixed_steps, plan.split_steps,
      plan.data_steps)
  for mesh in plan.meshes:
    impl = PlacementMeshImpl(mesh, "", devices)
    for axis in impl.shape.dims:
      link = axis_link_name(impl.shape, axis.name, devices)
      out += probes_lib.collective_probes(impl, axis, link, plan, dtype,
                                          itemsize, sync)
      out += probes_lib.overlap_probes(impl, axis, link, plan, dtype,
                                       itemsize, sync)
  return out


def run(plan, devices, emit, sync=None):
  """Runs ``plan`` on ``devices`` (TF device names); returns Samples.

  Each probe is warmed up, then timed ``plan.calls`` times (reference
  steps three times as often) and its median kept.  ``emit(event)``
  receives ``progress`` events (dicts) as probes end.

  Raises:
    CalibrationError: if a mesh's size differs from the device count.
  """
  samples = []
  probes = prepare(plan, devices, sync)
  for i, p in enumerate(probes):
    p.warm()
    calls = plan.calls * (3 if p.sample.what in ("step", "model_step")
                          else 1)
    samples.append(p.measured([p.once() for _ in range(calls)]))
    emit({"event": "progress", "done": i + 1, "total": len(probes),
          "label": p.label})
  return samples


def interleaved(probes, rounds, calls=1, seed=0):
  """Warms ``probes`` up, then times each ``calls`` times a round, in
  ``rounds`` rounds of a shuffled order (so that machine noise spreads
  over all of them); returns each probe's timings."""
  for p in probes:
    p.warm()
  times = [[] for _ in probes]
  order = list(range(len(probes)))
  rng = random.Random(seed)
  for _ in range(rounds):
    rng.shuffle(order)
    for i in order:
      times[i].extend(probes[i].once() for _ in range(calls))
  return times


def _devices_info(devices):
  """What calibration records about the measured devices."""
  tf = _tf()
  kinds = sorted({d.split("device:")[-1].split(":")[0] for d in devices})
  info = {"devices": list(devices), "device_types": kinds,
          "host_cores": os.cpu_count()}
  if kinds == ["CPU"] and not any(is_remote(d) for d in devices):
    # Threads each kernel may use (0: TensorFlow's default, one a core).
    info["intra_op_threads"] = (
        tf.config.threading.get_intra_op_parallelism_threads())
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


def _fetch_sync(out):
  """Waits for a probe's call on one remote device by fetching one element
  of its output: remote eager enqueues a function on one remote device and
  returns before it ran (its chain then times as nothing against its empty
  call), while a function over several devices (one output each) returns
  when done, and is left as it is."""
  if len(out) == 1:
    _tf().reshape(out[0], [-1])[:1].numpy()


def default_sync(devices):
  """What waits for a probe's call on ``devices``: a fetch where any is in
  another process (``mtf-worker`` tasks), else nothing (local calls return
  when done; GPUs get ``_gpu_sync`` from the caller)."""
  if any(is_remote(d) for d in devices):
    return _fetch_sync
  return lambda out: None


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
