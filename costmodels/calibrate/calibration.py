"""``calibrate(...)``: measure the devices at hand, fit, write a topology.

The measurements run in a subprocess (``python -m
costmodels.calibrate.measure``), because TensorFlow fixes its logical CPU
devices (and a cluster connection) once per process; this process only
reads the subprocess's JSON events, shows progress, fits and writes the
file, and never imports TensorFlow.

Fitted, per physical dimension of the device set (``device``: the devices
of one process; ``process``: between processes), one
:class:`~costmodels.collective_fits.CollectiveFit` per collective kind,
named by the algorithm the placement backend runs for it, and, for the
chip, the matmul throughput,
the elementwise bandwidth, the fixed cost per kernel launch and the
shared-compute factor.  All-split moves no data: it is a slicewise kernel,
priced by the compute fit, and its timings only check that fit.

Also fitted: one :class:`~costmodels.compute_fits.ComputeClassFit` per
contraction pattern (plain, batched and transposed einsums, the two
convolution kernels), and per physical link the overlap efficiency of an
all-reduce with independent compute
(:attr:`~costmodels.hardware.LinkSpec.overlap_efficiency`, see
:mod:`costmodels.overlap`).
"""

import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
from typing import NamedTuple, Tuple

from costmodels import compute as compute_lib
from costmodels import hardware
from mesh_tf.core import dims as dims_lib
from costmodels.calibrate import collective_fit
from costmodels.calibrate import compute_fit
from costmodels.calibrate import overlap_fit
from costmodels.calibrate import pattern_fit
from costmodels.calibrate import timings
from costmodels.calibrate import threaded_kernel
from costmodels.calibrate import record_costs
from costmodels.calibrate import step_costs
from costmodels.calibrate import topology_file
from costmodels.calibrate.timings import CalibrationError, Sample
from costmodels.topology.types import PhysicalDim, Topology

# What PlacementMeshImpl runs for each collective kind.
_ALGORITHMS = {"allreduce": "reduce_broadcast",
               "allgather": "concat_per_device", "alltoall": "split_concat",
               "permute": "copy"}


FIT_COLUMNS = ("what", "link", "detail", "latency_s", "rate", "unit",
               "rel_residual")


class Calibration(NamedTuple):
  """What :func:`calibrate` measured and fitted.

  Attributes:
    topology: the fitted :class:`~costmodels.Topology`.
    samples: every :class:`~costmodels.calibrate.timings.Sample`.
    fits: one row per fitted term: ``(what, link, detail, latency_s,
      rate, unit, rel_residual)`` (see :meth:`frame`); ``rate`` is in
      ``unit`` (``FLOP/s``, ``B/s``, or ``x`` for the shared-compute
      factor).
    path: the topology file written, or None.
    seconds: wall time of the measurements.
    info: what the measuring process reported about its devices.
  """
  topology: Topology
  samples: Tuple[Sample, ...]
  fits: Tuple[tuple, ...]
  path: str
  seconds: float
  info: dict

  def frame(self):
    """The fits as a pandas DataFrame (one row per fitted term)."""
    import pandas as pd  # pylint: disable=import-outside-toplevel
    return pd.DataFrame(list(self.fits), columns=list(FIT_COLUMNS))


def _compute_price(chip, flops, nbytes):
  t = max(flops / chip.peak_bf16_flops_per_s,
          nbytes / chip.hbm_bandwidth_bytes_per_s)
  return chip.launch_overhead_s + chip.shared_compute_factor * t


def _link_fits(samples, link, chip):
  """The CollectiveFits of one physical link, and their residual rows.

  Each rep's shape-restoring kernel is priced by ``chip`` (the chained
  kernels' compute fit) as a known part of its timing.  (Taking that price
  off each timing first, as this once did, left a few microseconds of a
  rep of hundreds, clamped at 2%, on half of the all-reduce timings, and
  their relative residuals decided the fit: RMS residuals of 82% and an
  all-reduce 20x too fast on 8 logical CPU devices.)"""
  rows = [s for s in samples if s.link == link]
  fits, table = [], []
  for kind, algorithm in _ALGORITHMS.items():
    r = collective_fit.fit_collective(
        rows, kind, algorithm,
        offset=lambda s: _compute_price(chip, s.flops, s.companion_bytes))
    if r is None:
      continue
    fits.append(r.fit)
    axes = ", ".join(f"{a} {e:.0%}" for a, e in r.by_axis)
    table.append((kind, link, f"{algorithm} (steps {r.fit.steps}, volume "
                  f"{r.fit.volume}); per axis: {axes}", r.fit.latency_s,
                  r.fit.bandwidth_bytes_per_s, "B/s", r.fit.rel_residual))
  return tuple(fits), table


def _link_spec(name, kind, fits, samples, rows):
  """The LinkSpec of physical link ``name``: its collective fits and its
  overlap efficiency (a row is added to ``rows``)."""
  # Kinds without a fit (e.g. reduce-scatter, which the lowering never
  # issues) fall back to the ring formulas with the all-gather's numbers.
  base = next((f for f in fits if f.kind == "allgather"), None) or (
      fits[0] if fits else None)
  bw = base.bandwidth_bytes_per_s if base else math.inf
  lat = base.latency_s if base else 0.0
  eta = overlap_fit.fit_overlap(samples, name)
  if eta is not None:
    rows.append(("overlap", name, f"all-reduce beside compute, "
                 f"{eta[1]} timings (median abs. deviation {eta[2]:.2f})",
                 0.0, eta[0], "eta", eta[2]))
  return hardware.LinkSpec(name, kind, bw, lat, collectives=fits,
                           overlap_efficiency=None if eta is None
                           else eta[0])


def fit_topology(samples, info, name="calibrated", dtype="float32"):
  """Fits a Topology to ``samples`` measured on the devices of ``info``.

  Args:
    samples: :class:`~costmodels.calibrate.timings.Sample` timings.
    info: ``{"devices": [...], "device_types": [...], ...}`` as the
      measuring process reports it; ``info["devices"]`` fixes the device
      count and whether there are several processes.
    name: the topology's name.
    dtype: the dtype whose matmul throughput prices FLOPs.

  Returns:
    ``(topology, fit rows)``.

  Raises:
    CalibrationError: if a kind of timing needed for the fit is missing.
  """
  from costmodels.calibrate.measure import process_of  # pylint: disable=import-outside-toplevel
  devices = list(info["devices"])
  n = len(devices)
  procs = []
  for d in devices:
    if process_of(d) not in procs:
      procs.append(process_of(d))
  cf = compute_fit.fit_compute(samples, n, dtype)
  # Logical CPU devices whose process gave each kernel one thread hand
  # nothing to a pool (mesh_tf.lowering.placement.cpu_thread_pools).
  threaded = threaded_kernel.fit_threaded_kernel(
      samples, n, handoff=info.get("intra_op_threads") != 1)
  threaded_s = threaded.seconds if threaded else 0.0
  matrix_s = threaded.matrix_s if threaded else 0.0
  is_gpu = "GPU" in info.get("device_types", ())
  per_device_memory = int(info.get("memory_bytes_per_device") or 0)
  chip = hardware.ChipSpec(
      name=(info.get("gpu_name") or "gpu") if is_gpu else f"cpu-{n}x-logical",
      kind="gpu" if is_gpu else "cpu",
      peak_bf16_flops_per_s=cf.peak_flops_per_s,
      hbm_bytes=per_device_memory,
      hbm_bandwidth_bytes_per_s=cf.bandwidth_bytes_per_s,
      link=hardware.LinkSpec("device", "host", math.inf, 0.0),
      launch_overhead_s=cf.launch_overhead_s,
      shared_compute_factor=cf.shared_compute_factor,
      matmul_flops_by_dtype=compute_fit.matmul_peaks_by_dtype(
          samples, dtype, cf.peak_flops_per_s),
      compute_fits=pattern_fit.fit_patterns(samples, dtype, n,
                                            cf.launch_overhead_s, threaded_s,
                                            matrix_s),
      threaded_kernel_s=threaded_s,
      inline_kernel_max=threaded.inline_max if threaded else (),
      batch_matrix_s=matrix_s,
      # Logical CPU devices share the host's cores: TF's executor runs one
      # device ahead of the others (costmodels.sync_hold).
      devices_in_lockstep=is_gpu)
  # The collectives' shape-restoring kernels ran in the probes' chains, at
  # the chained kernels' launch cost: price them so, not as a step record.
  chained = chip
  local_fits, table = _link_fits(samples, "device", chained)
  step = step_costs.fit_step_overhead(samples)
  # A record of a step runs while every device runs its own: it costs at
  # least a kernel launched on all devices at once (the chained launches
  # and the reference steps' slope, compute_fit), not one launched alone.
  chip, record_rows, rc = _with_record_costs(
      samples, chip, len(procs) == 1, cf.launch_overhead_s,
      step.seconds if step else 0.0,
      step_costs.collective_volumes(local_fits))
  res = dict(cf.residuals)
  rows = [("einsum", "chip", f"{dtype}, one device alone", 0.0,
           cf.peak_flops_per_s, "FLOP/s", res["compute, one device"]),
          ("elementwise", "chip", "bytes read + written, one device", 0.0,
           cf.bandwidth_bytes_per_s, "B/s", res["compute, one device"]),
          ("launch", "chip", f"per compute record, all {n} devices (one "
           f"kernel alone: {cf.launch_alone_s * 1e6:.3g} us)",
           cf.launch_overhead_s, 0.0, "", res["compute, all devices"]),
          ("shared compute", "chip", f"slow-down when all {n} devices "
           "compute", 0.0, cf.shared_compute_factor, "x",
           res["compute, all devices"])]
  if step is not None:
    chip = chip._replace(step_overhead_s=step.seconds)
    rows.append(("step", "chip", f"fixed cost of one call of a step: the "
                 f"intercept of {step.samples} reference steps over their "
                 f"records ({step.record_s * 1e6:.3g} us a record)",
                 step.seconds, 0.0, "", step.rel_residual))
  if threaded is not None:
    lim = threaded.inline_max
    rows.append(("threaded kernel", "chip", (
        f"matrix product above a batch of {lim[0]}, {lim[1]} rows or "
        f"{lim[2]} columns, beyond its pattern's price ({threaded.samples} "
        "tiny products)" if lim
        else f"no step between tiny matrix products ({threaded.samples} "
        "timed)"), threaded_s, 0.0, "", threaded.rel_residual))
    batches = [s.matrix[0] for s in samples
               if s.what == "kernel" and len(s.matrix) == 3]
    rows.append(("batch matrix", "chip", "each matrix of a batched product "
                 f"beyond the first (tiny products, batches up to "
                 f"{max(batches)})", matrix_s, 0.0, "",
                 threaded.rel_residual))
  rows += record_rows
  rows += [(f"einsum {f.pattern}", "chip", f"{dtype}, all {n} devices "
            f"(+{f.latency_s * 1e6:.3g} us, bytes at "
            f"{f.bandwidth_bytes_per_s / 1e9:.3g} GB/s"
            + (", tile width/in/out {}/{}/{}".format(*f.tile) if f.tile
               else "") + ")", f.latency_s,
            f.flops_per_s, "FLOP/s", f.rel_residual)
           for f in chip.compute_fits]
  rows += table
  message_s = rc.message_s if rc and len(procs) == 1 else 0.0
  barrier_s = rc.collective_s if rc and len(procs) == 1 else 0.0
  gamma = rc.collective_byte_s if rc and len(procs) == 1 else 0.0
  # A message of a collective in a step costs at least what the steps say,
  # and each byte of its volume what the chain says and the steps' extra.
  local_fits = tuple(f._replace(
      latency_s=max(f.latency_s, message_s),
      bandwidth_bytes_per_s=1.0 / (1.0 / f.bandwidth_bytes_per_s + gamma)
      if gamma > 0 else f.bandwidth_bytes_per_s) for f in local_fits)
  dims = []
  per_task = n // max(1, len(procs))
  if len(procs) > 1:
    proc_fits, table = _link_fits(samples, "process", chained)
    rows += table
    dims.append(PhysicalDim("process", len(procs),
                            _link_spec("process", "grpc", proc_fits,
                                       samples, rows),
                            "switch"))
  local = _link_spec("device", "gpu" if is_gpu else "host", local_fits,
                     samples, rows)._replace(barrier_s=barrier_s)
  dims.append(PhysicalDim("device", per_task if len(procs) > 1 else n,
                          local, "switch"))
  chip = chip._replace(link=dims[-1].link)
  topology = Topology(name, chip, tuple(dims))
  rows += _allsplit_check(samples, chip)
  return topology, rows


def _with_record_costs(samples, chip, one_process, floor_s=0.0, step_s=0.0,
                       collective_volume=None):
  """``chip`` with the fixed cost per record fitted on the ``model_step``
  timings (:mod:`costmodels.calibrate.record_costs`), if any, as its
  ``launch_overhead_s`` (the elementwise record's, at least ``floor_s``:
  what one kernel costs to launch on every device at once) and its class fits'
  ``latency_s`` (the excess of each class over it); on ``one_process``
  (the steps' messages all on the one ``device`` link), the
  cost of a message in a step, which each of the link's collective fits'
  ``latency_s`` is raised to, and the cost of a collective in a step, the
  link's ``barrier_s`` (else 0 and 0); and the fit's rows; ``step_s`` and
  ``collective_volume`` as :func:`record_costs.fit_record_costs` takes
  them.  Returns ``(chip, rows, RecordCosts or None)``."""
  rc = record_costs.fit_record_costs(
      samples, chip.compute_fit,
      threaded=lambda matrix: compute_lib.handoff_time(matrix, chip),
      step_s=step_s, collective_volume=collective_volume,
      waits=chip.devices_in_lockstep)
  if rc is None:
    return chip, [], None
  # A record of a step costs at least what one kernel on every device does:
  # noisy steps must not fit it to nothing.
  launch = max(rc.costs.get("elementwise", rc.common_s), floor_s)

  def in_step(f):
    if rc.byte_s > 0:
      f = f._replace(bandwidth_bytes_per_s=1.0 / (
          1.0 / f.bandwidth_bytes_per_s + rc.byte_s))
    if f.pattern in rc.costs:
      f = f._replace(latency_s=max(rc.costs[f.pattern] - launch, 0.0))
    return f
  fits = tuple(in_step(f) for f in chip.compute_fits)
  detail = ", ".join(f"{c} {t * 1e6:.3g} us" for c, t in
                     sorted(rc.costs.items()))
  rows = [("record in a step", "chip", f"fixed cost per compute record, "
           f"fitted on {rc.samples} model steps: {detail} (common "
           f"{rc.common_s * 1e6:.3g} us)", launch, 0.0, "", rc.rel_residual)]
  if rc.byte_s > 0:
    rows.append(("bytes in a step", "chip", "seconds per byte a record "
                 "moves in a step beyond its pattern fit's, fitted on the "
                 "same steps (each pattern fit's bandwidth lowered by it)",
                 0.0, 1.0 / rc.byte_s, "B/s", rc.rel_residual))
  chip = chip._replace(launch_overhead_s=launch, compute_fits=fits)
  if not one_process:
    return chip, rows, rc
  if rc.message_s > 0:
    rows.append(("message in a step", "device", "fixed cost per slice a "
                 "device receives in a collective, fitted on the model "
                 "steps with collectives (each fit's latency at least "
                 "this)", rc.message_s, 0.0, "", rc.rel_residual))
  if rc.collective_s > 0:
    rows.append(("collective in a step", "device", "fixed cost per "
                 "collective the step waits for (not a gradient sync), "
                 "whatever its group (the members wait for each other), "
                 "fitted on the same steps (the link's barrier_s)",
                 rc.collective_s, 0.0, "", rc.rel_residual))
  if rc.collective_byte_s > 0:
    rows.append(("collective bytes in a step", "device", "seconds per "
                 "byte of a collective's volume in a step beyond its chained "
                 "fit's, fitted on the model steps with collectives of "
                 "different sizes (each fit's bandwidth lowered by it)",
                 0.0, 1.0 / rc.collective_byte_s, "B/s", rc.rel_residual))
  return chip, rows, rc


def _allsplit_check(samples, chip):
  """All-split is two slicewise kernels per rep; how well compute prices
  them, per axis (a check, nothing is fitted)."""
  by_axis = {}
  for s in samples:
    if s.what == "allsplit":
      pred = (_compute_price(chip, 0, s.nbytes * (1 + 1 / s.group_size))
              + _compute_price(chip, 0, s.companion_bytes))
      by_axis.setdefault(s.axis, []).append((pred - s.seconds) / s.seconds)
  if not by_axis:
    return []
  errs = [e for v in by_axis.values() for e in v]
  rms = math.sqrt(sum(e * e for e in errs) / len(errs))
  detail = "priced as compute (no fit); per axis: " + ", ".join(
      f"{a} {math.sqrt(sum(e * e for e in v) / len(v)):.0%}"
      for a, v in by_axis.items())
  return [("allsplit", "device", detail, 0.0, 0.0, "", rms)]


def _command(meshes, cpu_devices, gpus, cluster, devices_per_task, quick,
             dtypes, cluster_timeout_s):
  cmd = [sys.executable, "-m", "costmodels.calibrate.measure"]
  if cpu_devices is not None:
    cmd += ["--cpu-devices", str(int(cpu_devices))]
  elif gpus is not None:
    cmd += ["--gpus", str(int(gpus))]
  else:
    cmd += ["--cluster", str(cluster), "--timeout-s",
            str(float(cluster_timeout_s))]
    if devices_per_task is not None:
      cmd += ["--devices-per-task", str(int(devices_per_task))]
  for m in meshes:
    cmd += ["--mesh", str(m)]
  for d in dtypes:
    cmd += ["--dtype", d]
  if quick:
    cmd.append("--quick")
  return cmd


def default_meshes(num_devices, processes=1):
  """``x:N`` and, for 8 devices, ``a:2;b:4``; for a cluster of ``processes``
  tasks, ``hosts:P;local:D``."""
  if processes > 1:
    return (f"hosts:{processes};local:{num_devices // processes}",)
  if num_devices == 8:
    return ("x:8", "a:2;b:4")
  return (f"x:{num_devices}",)


def _run_measurements(cmd, timeout_s, on_event):
  """Runs the measuring subprocess; returns its events, after passing each
  to ``on_event``.  The subprocess is killed after ``timeout_s``."""
  env = dict(os.environ)
  root = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  events = []
  with tempfile.TemporaryFile() as err:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                            stdin=subprocess.DEVNULL, env=env, text=True)
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    try:
      for line in proc.stdout:
        line = line.strip()
        if line.startswith("{"):  # TF may print other lines
          events.append(json.loads(line))
          on_event(events[-1])
      proc.wait()
    finally:
      timed_out = not timer.is_alive() and proc.returncode != 0
      timer.cancel()
      if proc.poll() is None:
        proc.kill()
        proc.wait()
    err.seek(0)
    tail = err.read().decode("utf-8", "replace")[-1500:]
  errors = [e for e in events if e["event"] == "error"]
  if errors:
    raise CalibrationError(errors[0]["message"])
  if timed_out:
    raise CalibrationError(f"the measurements did not finish within "
                           f"{timeout_s:g} s; raise timeout_s (--timeout) "
                           "or measure with quick=True (--quick)")
  if not any(e["event"] == "done" for e in events):
    raise CalibrationError("the measuring process stopped without results "
                           f"(exit code {proc.returncode}): {tail}")
  return events


def calibrate(output=None, meshes=None, cpu_devices=None, gpus=None,
              cluster=None, devices_per_task=None, quick=False, name=None,
              *, dtypes=("float32", "bfloat16"), progress=None, timeout_s=600.0,
              cluster_timeout_s=30.0):
  """Measures devices, fits a topology and (optionally) writes it.

  Give exactly one device source.

  Args:
    output: path of the topology file to write (``.json``), or None.
    meshes: mesh strings whose axes are measured (default
      :func:`default_meshes`); each must have one processor per device.
    cpu_devices: measure this many TF logical CPU devices of this machine.
    gpus: measure this many local GPUs.
    cluster: measure the devices of running ``mtf-worker`` tasks
      (``"host:port,host:port"``); ``devices_per_task`` of each.
    quick: the short plan (about 20 s on a 2-core machine, instead of 60).
    name: the topology's name (default: the file name, or ``calibrated``).
    dtypes: einsum dtypes, each timed on one device (all but the first
      only in the full plan); the first prices FLOPs.
    progress: a :class:`rich.console.Console` to show a progress bar on,
      or None for no output.
    timeout_s: bound on the measurements.
    cluster_timeout_s: how long to wait for every task of ``cluster`` to
      answer.

  Returns:
    A :class:`Calibration`.

  Raises:
    CalibrationError: for no or several device sources, a device count
      the machine cannot give, a mesh of the wrong size, a cluster that
      does not answer, or measurements that fail.
    costmodels.calibrate.TopologyFileError: if ``output`` cannot be written
      (no file is left behind).

  Example:
    >>> cal = calibrate("my.json", cpu_devices=8)    # doctest: +SKIP
    >>> costmodels.get_topology("my.json").num_chips  # doctest: +SKIP
    8
  """
  sources = [x for x in (cpu_devices, gpus, cluster) if x is not None]
  if len(sources) != 1:
    raise CalibrationError("give exactly one of cpu_devices (e.g. 8), gpus "
                           "or cluster ('host:port,host:port') to calibrate")
  if cpu_devices is not None and int(cpu_devices) < 1:
    raise CalibrationError(f"cpu_devices={cpu_devices}: give at least 1 "
                           "logical CPU device")
  if output is not None and not str(output).lower().endswith(".json"):
    raise topology_file.TopologyFileError(
        f"topology file {str(output)!r} must end in .json")
  if meshes is None:
    if cluster is not None:
      tasks = len(str(cluster).split(","))
      if devices_per_task is None:
        raise CalibrationError("give devices_per_task (the workers' "
                               "--cpu-devices) or meshes for a cluster")
      meshes = default_meshes(tasks * int(devices_per_task), tasks)
    else:
      meshes = default_meshes(int(cpu_devices if cpu_devices is not None
                                  else gpus))
  meshes = tuple(meshes)
  count = cpu_devices if cpu_devices is not None else gpus
  if count is None and devices_per_task is not None:
    count = len(str(cluster).split(",")) * int(devices_per_task)
  for m in meshes:
    size = dims_lib.convert_to_shape(m).size
    if count is not None and size != int(count):
      raise CalibrationError(
          f"mesh {m!r} has {size} processors but {count} devices are "
          f"measured; give meshes of {count} processors (e.g. 'x:{count}')")
  cmd = _command(meshes, cpu_devices, gpus, cluster, devices_per_task, quick,
                 dtypes, cluster_timeout_s)
  bar = _Progress(progress)
  with bar:
    events = _run_measurements(cmd, timeout_s, bar.update)
  info = next(e for e in events if e["event"] == "info")
  info = {k: v for k, v in info.items() if k != "event"}
  info.setdefault("memory_bytes_per_device", _host_memory_bytes()
                  // max(1, len(info["devices"])))
  samples = tuple(timings.sample_from_dict(e)
                  for e in events if e["event"] == "sample")
  seconds = next(e for e in events if e["event"] == "done")["seconds"]
  if name is None:
    name = (os.path.splitext(os.path.basename(str(output)))[0] if output
            else "calibrated")
  topology, rows = fit_topology(samples, info, name, dtypes[0])
  path = None
  if output is not None:
    meta = {"created_utc": datetime.datetime.now(
        datetime.timezone.utc).isoformat(timespec="seconds"),
            "meshes": list(meshes), "quick": bool(quick),
            "measure_seconds": seconds, "devices": info,
            "fits": [dict(zip(FIT_COLUMNS, r)) for r in rows],
            "samples": [s._asdict() for s in samples]}
    topology_file.write_topology(output, topology, json_safe(meta))
    path = str(output)
  return Calibration(topology, samples, tuple(rows), path, seconds, info)


def json_safe(obj):
  if isinstance(obj, float) and not math.isfinite(obj):
    return None
  if isinstance(obj, dict):
    return {k: json_safe(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [json_safe(v) for v in obj]
  return obj


def _host_memory_bytes():
  try:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  except (ValueError, OSError, AttributeError):
    return 0


class _Progress:
  """A rich progress bar fed by the measuring process's events."""

  def __init__(self, console):
    self.console, self._bar, self._task = console, None, None

  def __enter__(self):
    if self.console is not None:
      from rich.progress import (BarColumn, Progress, TextColumn,  # pylint: disable=import-outside-toplevel
                                 TimeElapsedColumn)
      self._bar = Progress(TextColumn("{task.description}"), BarColumn(),
                           TextColumn("{task.completed}/{task.total}"),
                           TimeElapsedColumn(), console=self.console,
                           transient=False)
      self._bar.__enter__()
      self._task = self._bar.add_task("starting TensorFlow", total=None)
    return self

  def update(self, ev):
    if self._bar is None:
      return
    if ev["event"] == "plan":
      self._bar.update(self._task, total=ev["total"],
                       description="measuring")
    elif ev["event"] == "progress":
      self._bar.update(self._task, completed=ev["done"],
                       description=ev["label"][:48].ljust(48))

  def __exit__(self, *exc):
    if self._bar is not None:
      self._bar.update(self._task, description="measured".ljust(48))
      self._bar.__exit__(*exc)
    return False
