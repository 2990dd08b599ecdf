"""Prepared micro-benchmarks ("probes") on real devices, through the real
lowering.

Every probe runs the code a lowered step runs: the collectives of
:class:`mesh_tf.PlacementMeshImpl` (``allreduce``, ``allconcat``,
``allsplit``, ``alltoall``, ``shift_by_n_processors``) and its slicewise
kernels, fused as in a step, inside one ``tf.function``.  An einsum runs
the kernel the lowering makes for its slice shapes inside a
``tf.function`` (:func:`einsum_kernel_for`).  A probe chains
``reps`` repetitions of one *rep* and is timed against an empty call that
only reads its inputs; :meth:`Probe.once` returns one paired difference per
rep.  Probes are prepared once and can be timed in any order and as often
as wanted, so that a benchmark can interleave them with its own work (the
machine state the fit sees is then the one the benchmark sees).

The reps:

* a collective, then one small slicewise kernel that restores the slice
  shape (its price, from the compute fit, is taken off when fitting);
* an einsum of each contraction pattern of
  :func:`mesh_tf.lowering.einsum_kernels.einsum_pattern` (plain matmul,
  batched, transposed operands or result) in the forms models issue, and
  the two convolution kernels -- chained by control dependencies, so that
  forms whose output is not their input's shape chain too;
* an elementwise multiply (bytes) or a one-element multiply (the fixed
  cost of a kernel inside a fused segment);
* a collective and an independent einsum chain in one call, and each alone
  (how much of the communication the compute hides: the overlap
  efficiency);
* whole training steps of a small reference graph at several depths
  (:func:`reference_step`): their slope over compute records is what one
  record of a lowered step costs to launch.

TensorFlow is imported only inside the functions that touch devices.
"""

import math
import statistics
import time

from costmodels.calibrate.timings import CalibrationError, Sample
from mesh_tf.lowering import einsum_kernels

COLLECTIVES = ("allreduce", "allgather", "alltoall", "permute", "allsplit")


def _tf():
  from mesh_tf.lowering.lazy_tf import tf  # pylint: disable=import-outside-toplevel
  return tf


class Probe:
  """One prepared benchmark.

  Attributes:
    label: what it measures, for progress lines.
    sample: the :class:`Sample` it yields, with ``seconds`` still 0.
  """

  def __init__(self, label, sample, fns, reps, sync):
    self.label, self.sample = label, sample
    self._fns, self._reps, self._sync = fns, reps, sync

  def _call(self, fn):
    t0 = time.perf_counter()
    self._sync(fn())
    return time.perf_counter() - t0

  def warm(self):
    """Traces, optimises and runs each function once."""
    for f in self._fns:
      self._call(f)

  def once(self):
    """Seconds of one rep: one call of the chain minus one empty call (run
    back to back, so a burst of other work lands on both), over ``reps``."""
    t = [self._call(f) for f in self._fns]
    diff = t[0] - (t[1] if len(t) > 1 else 0.0)
    return max(diff, 1e-9) / self._reps

  def measured(self, times, statistic="median"):
    """:attr:`sample` with the ``statistic`` (``"median"`` or ``"mean"``)
    of ``times`` as its seconds."""
    pick = {"median": statistics.median, "mean": statistics.fmean}
    return self.sample._replace(seconds=pick[statistic](times))


def empty_call(inputs):
  """A ``tf.function`` returning copies of the ``inputs``' slices (a
  :func:`_variables` reader), over several devices each made on its
  slice's device.  (Unplaced, the copies ran on the caller's default
  device: on ``mtf-worker`` tasks every slice then went to the client, and
  the pairs timed a fused multiply on 8 devices at about 1 GB/s a device
  where it runs at 6-8.)  On one device they stay unplaced: a call on one
  remote device alone returns before it has run and times as nothing even
  when waited for (measured), while one that also touches the caller's
  device returns when done."""
  tf = _tf()
  place = len(inputs.devices) > 1

  def empty():
    out = []
    for d, t in zip(inputs.devices, inputs.tensor_list):
      with tf.device(d if place else None):
        out.append(tf.identity(t))
    return out
  return tf.function(empty, autograph=False)


def _probe(label, sample, chain, inputs, reps, sync, empty=None):
  """A Probe timing ``chain()`` against :func:`empty_call` of its
  ``inputs`` (or ``empty``, that call shared by probes of one input)."""
  fns = [_tf().function(chain, autograph=False), empty or empty_call(inputs)]
  return Probe(label, sample, fns, reps, sync)


def _variables(impl, slice_shape, dtype):
  """A LaidOutTensor reading one zero-filled variable per device, each
  read on its device; ``devices`` names them."""
  from mesh_tf.lowering.mesh_impl import LaidOutTensor  # pylint: disable=import-outside-toplevel
  tf = _tf()
  vs = []
  for d in impl.devices:
    with tf.device(d):
      vs.append(tf.Variable(tf.zeros(slice_shape, dtype), trainable=False))

  class _Reader(LaidOutTensor):
    __slots__ = ()

    @property
    def tensor_list(self):
      out = []
      for d, v in zip(impl.devices, vs):
        with tf.device(d):
          out.append(v.value())
      return out

    @property
    def devices(self):
      return list(impl.devices)
  return _Reader(slice_shape, dtype)


def _square(impl, x):
  """A cheap real slicewise kernel on every device: ``x * x``.  (Not a
  multiply by a constant: grappler folds a chain of those into one.)"""
  return impl.slicewise(lambda t: t * t, x, slice_shape=x.slice_shape)


def _capped(reps, max_reps):
  """``reps``, at most ``max_reps`` (0: no cap; the quick plan's cap:
  tracing a chain costs in proportion to its reps, and is most of what a
  probe costs)."""
  return min(reps, max_reps) if max_reps else reps


def _reps_for(nbytes, max_reps=0):
  """Reps of a chain of ``nbytes`` slices: fewer as they grow, at most
  ``max_reps`` (see :func:`_capped`)."""
  return _capped(6 if nbytes <= 131072 else 3 if nbytes <= 1048576 else 2,
                 max_reps)


def _chain(impl, rep, x, reps):
  def chain():
    y = x
    for _ in range(reps):
      y = rep(y)
    return list(y.tensor_list)
  return chain


def _contraction_chain(impl, kernel, a, b, out_shape, reps, flops):
  """``reps`` contractions ``kernel(a, b)`` on every device, each after
  the previous one (a control dependency, so that they neither overlap
  nor fold, whatever their output shape).  Each reads both operands
  afresh, as a step's products read tensors of their own: a kernel that
  transposes an operand then transposes it every rep (not once, shared
  by every rep through common subgraph elimination)."""
  tf = _tf()

  def after(u, v, prev):
    with tf.control_dependencies([prev]):
      return kernel(tf.identity(u), tf.identity(v))

  def chain():
    y = impl.slicewise(kernel, a, b, slice_shape=out_shape, flops=flops,
                       matmul=True)
    for _ in range(reps - 1):
      y = impl.slicewise(after, a, b, y, slice_shape=out_shape, flops=flops,
                         matmul=True)
    return list(y.tensor_list)
  return chain


def einsum_kernel_for(eq, xs, ws):
  """The kernel the lowering runs for ``eq`` on ``[xs] x [ws]`` slices in
  a ``tf.function`` step: :func:`mesh_tf.lowering.einsum_kernels.
  einsum_kernel` with those slice shapes (without them it would be
  ``tf.einsum``, which a step does not run), made when it runs, so that
  it is made inside the probe's traced function as the lowering makes it
  inside the step's (eagerly it would be ``tf.einsum`` again)."""
  shapes = (tuple(xs), tuple(ws))

  def kernel(a, b):
    return einsum_kernels.einsum_kernel(eq, shapes)(a, b)
  return kernel


def _einsum_probe(impl, label, sample, eq, xs, ws, itemsize, sync, reps=None,
                  max_reps=0):
  """A Probe of ``eq`` on ``[xs] x [ws]`` slices chained on every device of
  ``impl``: ``sample`` with its bytes (read + written), FLOPs and
  ``matrix`` (the ``(batch, rows, cols)`` the kernel runs) filled in;
  ``reps`` by default 6, or 3 above 2e7 FLOPs, at most ``max_reps`` (0: no
  cap)."""
  dtype = sample.dtype
  a, b = _variables(impl, xs, dtype), _variables(impl, ws, dtype)
  flops = einsum_flops(eq, xs, ws)
  reps = _capped(reps or (6 if flops <= 2e7 else 3), max_reps)
  oshape = _einsum_out_shape(eq, xs, ws)
  nbytes = (math.prod(xs) + math.prod(ws) + math.prod(oshape)) * itemsize
  matrix = einsum_kernels.product_matrix(eq, (xs, ws))
  return _probe(label, sample._replace(nbytes=nbytes, flops=float(flops),
                                       matrix=matrix),
                _contraction_chain(impl, einsum_kernel_for(eq, xs, ws), a, b,
                                   oshape, reps, flops), a, reps, sync)


def _einsum_out_shape(eq, xs, ws):
  ins, out = eq.split("->")
  sizes = {}
  for word, shape in zip(ins.split(","), (xs, ws)):
    sizes.update(zip(word, shape))
  return tuple(sizes[c] for c in out)


def _conv_kernel(kind, ksize):
  """``conv``: a 3-D VALID convolution of ``[n, d, h, w, c]`` by
  ``[k, k, k, c, f]``; ``conv_filter``: its filter gradient from the input
  and an output gradient."""
  tf = _tf()
  if kind == "conv":
    return lambda x, w: tf.nn.convolution(x, w, padding="VALID")

  def grad_filter(x, dy):
    sizes = [ksize, ksize, ksize, int(x.shape[-1]), int(dy.shape[-1])]
    return tf.raw_ops.Conv3DBackpropFilterV2(
        input=x, filter_sizes=tf.constant(sizes, tf.int32), out_backprop=dy,
        strides=[1] * 5, padding="VALID")
  return grad_filter


def conv_dims(volume, c, f, k):
  """``(out_width, in_channels, out_channels)`` of a conv probe (see
  :func:`conv_shapes`), as a record's ``conv`` gives them."""
  width = volume[-1] if isinstance(volume, (tuple, list)) else volume
  return (width - k + 1, c, f)


def conv_shapes(kind, n, volume, c, f, k):
  """``(input shape, second operand shape, output shape, flops)`` of the
  conv probe ``kind`` on ``n`` volumes of ``volume`` (``(depth, height,
  width)``, or one side of a cube; ``c`` -> ``f`` channels, ``k``-cube
  filter), as the conv lowering counts FLOPs."""
  dims = tuple(volume) if isinstance(volume, (tuple, list)) else (volume,) * 3
  out = tuple(d - k + 1 for d in dims)
  flops = 2 * n * math.prod(out) * f * k ** 3 * c
  x, y = (n,) + dims + (c,), (n,) + out + (f,)
  if kind == "conv":
    return x, (k, k, k, c, f), y, flops
  return x, y, (k, k, k, c, f), flops


def compute_probes(impl, plan, dtype, itemsize, sync):
  """Probes of kernel launch, each einsum pattern, convolutions and
  elementwise work, on ``impl``'s devices all at once."""
  group = impl.size
  out = []
  x = _variables(impl, (1,), dtype)
  out.append(_probe(f"kernel launch, {group} device(s)",
                    Sample("launch", "", group, 2 * itemsize, 1.0, 0.0,
                           dtype),
                    _chain(impl, lambda y: _square(impl, y), x, 24), x, 24,
                    sync))
  for pattern, eq, xs, ws in plan.einsums:
    out.append(_einsum_probe(
        impl, f"einsum {pattern} {eq}, {group} device(s)",
        Sample("matmul", "", group, 0, 0.0, 0.0, dtype, pattern=pattern),
        eq, xs, ws, itemsize, sync, max_reps=plan.max_reps))
  for kind, (n, v, c, f, k) in plan.convs:
    xs, ws, oshape, flops = conv_shapes(kind, n, v, c, f, k)
    a, b = _variables(impl, xs, dtype), _variables(impl, ws, dtype)
    nbytes = (math.prod(xs) + math.prod(ws) + math.prod(oshape)) * itemsize
    out.append(_probe(
        f"{kind} {n}x{'x'.join(map(str, xs[1:4]))}x{c}->{f}, {group} "
        "device(s)",
        Sample("matmul", "", group, nbytes, float(flops), 0.0, dtype,
               pattern=kind,
               input_bytes=(math.prod(xs) + math.prod(ws)) * itemsize,
               conv=conv_dims(v, c, f, k)),
        _contraction_chain(impl, _conv_kernel(kind, k), a, b, oshape, 2,
                           flops), a, 2, sync))
  for nbytes in plan.elementwise_bytes:
    x = _variables(impl, (nbytes // itemsize,), dtype)
    reps = _reps_for(nbytes, plan.max_reps) * 2
    out.append(_probe(
        f"elementwise {nbytes // 1024} KiB, {group} device(s)",
        Sample("elementwise", "", group, 2 * nbytes, nbytes // itemsize, 0.0,
               dtype), _chain(impl, lambda y: _square(impl, y), x, reps),
        x, reps, sync))
  return out


#: ``(batch, rows, cols)`` of the ``kernel`` probes' tiny matrix products:
#: from ``(1, 8, 8)``, a sweep over rows, one over columns and one over the
#: batch, across the size where TF's CPU kernels stop running a product on
#: the calling thread (a batch of one, 16 rows, 64 columns on a 2-core
#: machine), and on to batches of many tiny matrices, whose cost grows with
#: their number however few their FLOPs (see
#: :func:`costmodels.calibrate.timings.fit_batch_matrix`).
KERNEL_SIZES = ((1, 8, 8), (1, 16, 8), (1, 32, 8), (1, 64, 8), (1, 8, 32),
                (1, 8, 64), (1, 8, 128), (1, 8, 256), (2, 8, 8), (4, 8, 8),
                (64, 8, 8), (256, 8, 8), (1024, 8, 8))


def kernel_probes(impl, dtype, itemsize, sync, sizes=KERNEL_SIZES,
                  max_reps=0):
  """Probes ``kernel``: chains of ``[batch, rows, 8] x [batch, 8, cols]``
  products on every device of ``impl`` at once, one per ``sizes`` entry
  (default :data:`KERNEL_SIZES`), of 6 reps or at most ``max_reps`` (0: no
  cap).  Their FLOPs are negligible: what they time is whether the kernel
  hands its work to a thread pool, and what each matrix of a batch costs
  (see :func:`costmodels.calibrate.threaded_kernel.fit_threaded_kernel`)."""
  return [_einsum_probe(
      impl, f"matrix product {batch}x{rows}x{cols}, {impl.size} device(s)",
      Sample("kernel", "", impl.size, 0, 0.0, 0.0, dtype, pattern="batched",
             matrix=(batch, rows, cols)),
      "abc,acd->abd", (batch, rows, 8), (batch, 8, cols), itemsize, sync,
      reps=6, max_reps=max_reps)
          for batch, rows, cols in sizes]


def einsum_flops(eq, xs, ws):
  """``2 * prod(size of every letter)`` of a two-input einsum."""
  ins, _ = eq.split("->")
  sizes = {}
  for word, shape in zip(ins.split(","), (xs, ws)):
    sizes.update(zip(word, shape))
  return 2 * math.prod(sizes.values())


def dtype_probe(impl, plan, dtype, sync):
  """One einsum of the plan's last plain-matmul form in ``dtype``, on one
  device (its throughput relative to the first dtype's)."""
  pattern, eq, xs, ws = [e for e in plan.einsums if e[0] == "matmul"][-1]
  a, b = _variables(impl, xs, dtype), _variables(impl, ws, dtype)
  flops = einsum_flops(eq, xs, ws)
  oshape = _einsum_out_shape(eq, xs, ws)
  return _probe(f"einsum {eq} {dtype}, 1 device",
                Sample("matmul", "", 1, 0, float(flops), 0.0, dtype,
                       pattern=pattern),
                _contraction_chain(impl, einsum_kernel_for(eq, xs, ws), a, b,
                                   oshape, 2, flops), a, 2, sync)


def _collective_rep(impl, kind, axis, m, w):
  """The rep of collective ``kind`` over ``axis`` on ``[m, w]`` slices, and
  the (flops, bytes) of its shape-restoring kernel."""
  tf = _tf()
  p = impl.shape.dims[impl.shape.index(axis)].size
  n_el = m * w
  if kind == "allreduce":
    return (lambda x: _square(impl, impl.allreduce(x, [axis])),
            (n_el, 2 * n_el))
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
    return (lambda x: _square(impl, impl.shift_by_n_processors(x, axis, 1,
                                                              True)),
            (n_el, 2 * n_el))
  if kind == "allsplit":
    def rep(x):
      y = impl.allsplit(x, axis, 0)
      return impl.slicewise(lambda t: tf.tile(t, [p, 1]), y,
                            slice_shape=(m, w), flops=0)
    return rep, (0, (1 + 1 / p) * n_el)
  raise CalibrationError(f"unknown collective {kind!r}; use one of "
                         f"{COLLECTIVES}")


def slice_shape_for(nbytes, itemsize, p):
  """``[m, w]`` with ``m * w * itemsize == nbytes`` (about) and ``m`` a
  multiple of ``p``, as square as it allows."""
  n = max(p, nbytes // itemsize)
  w = max(1, 2 ** int(math.log2(math.sqrt(n))))
  m = max(p, (n // w) // p * p)
  return m, w


def collective_probes(impl, axis, link, plan, dtype, itemsize, sync):
  """Probes of every collective kind over ``axis`` at the plan's sizes."""
  out = []
  for nbytes in plan.collective_bytes:
    # The kinds of one size read one input and share its empty call.
    m, w = slice_shape_for(nbytes, itemsize, axis.size)
    x = _variables(impl, (m, w), dtype)
    empty = empty_call(x)
    for kind in COLLECTIVES:
      rep, (cflops, cbytes) = _collective_rep(impl, kind, axis.name, m, w)
      reps = _reps_for(nbytes, plan.max_reps)
      out.append(_probe(
          f"{kind} {axis.name}={axis.size} {m * w * itemsize // 1024} KiB",
          Sample(kind, axis.name, axis.size, m * w * itemsize, float(cflops),
                 0.0, dtype, link, int(cbytes * itemsize)),
          _chain(impl, rep, x, reps), x, reps, sync, empty))
  return out


def overlap_probes(impl, axis, link, plan, dtype, itemsize, sync):
  """Per (all-reduce size, compute size) of the plan: the all-reduce over
  ``axis`` alone, an independent einsum chain alone, and both in one call
  (TF may run them concurrently, as it does a gradient sync and the rest
  of the backward pass).  Samples ``overlap_comm``/``overlap_compute``/
  ``overlap_both``; ``flops`` names the compute size."""
  out = []
  pattern, eq, xs, ws = [e for e in plan.einsums if e[0] == "matmul"][-1]
  oshape = _einsum_out_shape(eq, xs, ws)
  flops = einsum_flops(eq, xs, ws)
  a, b = _variables(impl, xs, dtype), _variables(impl, ws, dtype)
  for nbytes in plan.overlap_bytes:
    m, w = slice_shape_for(nbytes, itemsize, axis.size)
    x = _variables(impl, (m, w), dtype)
    empty = empty_call(x)
    for reps in plan.overlap_compute_reps:
      comp = _contraction_chain(impl, einsum_kernel_for(eq, xs, ws), a, b,
                                oshape, reps, flops)

      def comm(x=x):
        return list(impl.allreduce(x, [axis.name]).tensor_list)

      def both(comp=comp, comm=comm):
        return comm() + comp()
      for what, fn in (("overlap_comm", comm), ("overlap_compute", comp),
                       ("overlap_both", both)):
        out.append(_probe(
            f"{what[8:]} {axis.name}={axis.size} {nbytes // 1024} KiB, "
            f"{reps} einsums", Sample(what, axis.name, axis.size, nbytes,
                                      float(reps * flops), 0.0, dtype, link),
            fn, x, 1, sync, empty))
  return out


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
  from mesh_tf import training  # pylint: disable=import-outside-toplevel
  from mesh_tf.training import optimize
  n = len(devices)
  step = training.make_train_step(_reference_build(depth, width), f"x:{n}",
                                  "", devices, optimize.SgdOptimizer(0.01))
  x = np.zeros((8, width), np.float32)
  step(x).numpy()
  records = len(costmodels.trace_graph(step.graph, f"x:{n}", "").compute)
  return step, x, records


def step_probes(devices, depths=(1, 4, 8), width=8):
  """Probes ``step``: one training step of the reference graph at each
  depth, replicated on every device, with ``flops`` holding its number of
  compute records."""
  out = []
  for d in depths:
    step, x, records = reference_step(devices, d, width)
    out.append(Probe(f"reference step, {records} records",
                     Sample("step", "", len(devices), 0, float(records), 0.0),
                     [lambda step=step, x=x: step(x).numpy()], 1,
                     lambda _: None))
  return out
