"""Per-device memory of a lowered step, from the BFC allocator's own events.

On CPU, TF has one BFC allocator per process, shared by every logical
device, so ``tf.config.experimental.get_memory_info`` only gives the sum
over the devices.  While TF's profiler runs, the allocator records every
allocation and deallocation (``MemoryAllocation`` / ``MemoryDeallocation``
events of the host plane: address, bytes, and the ``tf_op`` that asked for
them).  Each op of the step's graph has a device -- an inlined fused
segment's ops are named under the call that has one, and an update op with
no device of its own runs where its variable is -- so each allocation can
be charged to its device, and each device's bytes followed through the
step: that device's peak, whether or not the other devices peak at the
same moment.

:func:`step_peaks` profiles two calls of a step and returns, per device,
the largest bytes the *second* call added over what that device held when
it began (buffers the first call made and the second frees, such as the
variables' copies TF makes when it updates a variable whose old value is
still read, are then charged to their device; buffers older than the
profile are not, and are left out).
"""

import collections
import glob
import re
import tempfile

MARK = "memory_truth_step"


def _events(xspace):
  """``(time_ns, kind, stats)`` of every allocator event, in time order,
  and the ``(start, end)`` ns of the marked step."""
  out, mark = [], None
  for plane in xspace.planes:
    names = {k: v.name for k, v in plane.event_metadata.items()}
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    for line in plane.lines:
      for ev in line.events:
        name = names.get(ev.metadata_id, "")
        t = line.timestamp_ns + ev.offset_ps / 1000
        if name == MARK:
          mark = (t, t + ev.duration_ps / 1000)
        if name not in ("MemoryAllocation", "MemoryDeallocation"):
          continue
        st = {}
        for s in ev.stats:
          if s.HasField("ref_value"):
            v = plane.stat_metadata[s.ref_value].name
          elif s.HasField("str_value"):
            v = s.str_value
          elif s.HasField("int64_value"):
            v = s.int64_value
          else:
            v = s.uint64_value
          st[stat_names.get(s.metadata_id)] = v
        out.append((t, name == "MemoryAllocation", st))
  out.sort(key=lambda e: e[0])
  return out, mark


def op_devices(graph):
  """``{op name: device index}`` of a step's graph (a ``FuncGraph``): its
  own device, else (an update of a captured variable) its first input's."""
  captured = {inner.op.name: outer.device for outer, inner in graph.captures}
  out = {}
  for op in graph.get_operations():
    d = op.device
    if not d and op.inputs:
      d = captured.get(op.inputs[0].op.name, "")
    m = re.search(r"CPU:(\d+)$", d or "")
    if m:
      out[op.name] = int(m.group(1))
  return out


def profile_step(tf, call):
  """The allocator events of the second of two ``call()``s and the one
  before it (see :func:`_events`): ``(events, (start, end))``."""
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=import-outside-toplevel
  with tempfile.TemporaryDirectory() as logdir:
    tf.profiler.experimental.start(logdir)
    try:
      call()
      with tf.profiler.experimental.Trace(MARK):
        call()
    finally:
      tf.profiler.experimental.stop()
    [path] = glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)
    xspace = xplane_pb2.XSpace()
    with open(path, "rb") as f:
      xspace.ParseFromString(f.read())
  events, mark = _events(xspace)
  if mark is None or not events:
    raise RuntimeError(
        "the profile holds no marked step or no allocator events: is TF's "
        "BFC host allocator on (import mesh_tf before TensorFlow starts)?")
  return events, mark


#: What a buffer weighs: ``allocation_bytes``, the chunk the BFC allocator
#: handed out (it does not split a free chunk under twice the request, so a
#: buffer can hold up to 2x its tensor); ``requested_bytes``, the tensor's
#: own bytes.
WEIGHTS = ("allocation_bytes", "requested_bytes")


def device_peaks(events, mark, devices, weight="allocation_bytes",
                 buffers=False):
  """``(peaks, unattributed)`` of a profiled step (:func:`profile_step`)
  with each buffer weighed by ``weight`` (one of :data:`WEIGHTS`); with
  ``buffers``, also ``{device: [(tf_op, bytes, made in the marked call),
  ...]}``, the buffers the device held at its peak."""
  start, end = mark
  owner, held = {}, collections.Counter()
  base, peak, live, at_peak = None, collections.Counter(), {}, {}
  for t, alloc, st in events:
    if base is None and t >= start:
      base = dict(held)
    if t > end:
      break
    addr = st["addr"]
    if alloc:
      nbytes = st.get(weight) or st["allocation_bytes"]
      op = st.get("tf_op") or ""
      d = devices.get(op.split("/")[0], devices.get(op))
      owner[addr] = (d, nbytes)
      held[d] += nbytes
      if buffers:
        live[addr] = (d, op, nbytes, base is not None)
      if base is not None and held[d] - base.get(d, 0) > peak[d]:
        peak[d] = held[d] - base.get(d, 0)
        if buffers:
          at_peak[d] = [(o, n, new) for dd, o, n, new in live.values()
                        if dd == d]
    elif addr in owner:
      d, nbytes = owner.pop(addr)
      held[d] -= nbytes
      live.pop(addr, None)
  unattributed = peak.pop(None, 0)
  if buffers:
    return dict(peak), unattributed, at_peak
  return dict(peak), unattributed


def step_peaks(tf, call, graph, weight="allocation_bytes"):
  """``(peaks, unattributed)``: per device index, the most bytes the
  second of two ``call()``s held at once beyond what the device held when
  that call began; and the largest bytes held by allocations no device
  could be found for (see the module docstring).  ``graph``: the step's
  traced graph, for :func:`op_devices`; ``weight``: see :data:`WEIGHTS`."""
  events, mark = profile_step(tf, call)
  return device_peaks(events, mark, op_devices(graph), weight)
