"""PlacementMeshImpl: processor p's slice lives on ``devices[p]``.

Devices may be TF logical CPU devices, GPUs, or remote
``/job:worker/task:k/device:CPU:0`` strings.  Collectives move data between
those devices with explicit cross-device reads: each participant computes the
result from its peers' slices under its own ``tf.device`` scope, so TensorFlow
copies the data there (in eager mode, in ``tf.function`` and in v1 graphs).
"""

import contextlib
import weakref

from mesh_tf.core.errors import FeedError, MeshSizeError, MtfError
from mesh_tf.lowering.fusion import SlicewiseFuser
from mesh_tf.lowering.geometry import ProcessorGroups
from mesh_tf.lowering.laid_out import LaidOutTensor, LaidOutVariable
from mesh_tf.lowering.lazy_tf import load_tensorflow, tf
from mesh_tf.lowering.backend import MeshBackend


class PlacementMeshImpl(MeshBackend):
  """A mesh backend that places one slice per TensorFlow device.

  Args:
    shape: mesh shape, e.g. ``"rows:2;cols:4"``.
    layout: layout rules, e.g. ``"batch:rows;d_ff:cols"``.
    devices: one device string per processor, in row-major mesh order.
    fuse: inside a graph (``tf.function`` or v1), trace each run of
      slicewise kernels between collectives once as a TF function and call
      it on every device, sharing functions between identical runs (see
      :mod:`mesh_tf.lowering.fusion`).  Results are the same either way;
      fused, a 32-layer Transformer step lowers and starts about twice as
      fast, and each step costs 10-20% more on logical CPU devices.

  Raises:
    MeshSizeError: if ``len(devices)`` differs from the mesh size.
  """

  def __init__(self, shape, layout, devices, fuse=True):
    super().__init__(shape, layout)
    devices = list(devices)
    if len(devices) != self.size:
      raise MeshSizeError(
          f"mesh {self.shape!r} has {self.size} processors but "
          f"{len(devices)} devices were given; pass exactly {self.size} "
          "devices or change the mesh shape")
    self.devices = devices
    # Every collective reads its groups; computed once for the mesh.
    self.groups = ProcessorGroups([d.size for d in self.shape.dims])
    self._variables = {}
    self._scalars = weakref.WeakKeyDictionary()  # graph -> shared constants
    self.fuser = SlicewiseFuser(self) if fuse else None

  def _on(self, p):
    """The device scope of processor ``p``.

    In a graph (``tf.function`` or v1), the graph's own ``device`` scope:
    ``tf.device`` does the same there but costs about half again as much as
    creating the op itself (measured while tracing), which dominated
    lowering time.
    """
    if tf.executing_eagerly():
      return tf.device(self.devices[p])
    return tf.compat.v1.get_default_graph().device(self.devices[p])

  @contextlib.contextmanager
  def in_control_flow(self):
    """Lowering inside TF v1 control flow (a ``tf.while_loop`` body in a
    graph without control flow v2): kernels run at once instead of joining
    fused segments, and shared scalar constants are made afresh, because
    neither may cross the loop's control-flow context."""
    fuser, scalars = self.fuser, self._scalars
    self.fuser, self._scalars = None, weakref.WeakKeyDictionary()
    try:
      yield
    finally:
      self.fuser, self._scalars = fuser, scalars

  def processor_groups(self, mesh_axes):
    """Like :meth:`MeshImpl.processor_groups`, from :attr:`groups`."""
    return self.groups[mesh_axes]

  def _group_lists(self, x, axes, ordered=False):
    # ``ordered``: one dim's axes, major first; position c in a group holds
    # block c (see geometry.ordered_processor_groups).
    groups = (self.groups.ordered(tuple(axes)) if ordered
              else self.processor_groups(tuple(axes)))
    return [(g, [x.tensor_list[p] for p in g]) for g in groups]

  def _n(self, axes):
    return self._group_size(axes)

  # An all-reduce sums once, on the group's first device, and copies the
  # sum out.  Every device summing its peers' slices itself is one hop
  # shorter (1.5x faster on a lone 4 KiB all-reduce on 8 logical CPU
  # devices), but it does the sum p times: inside whole steps, where the
  # devices share the host's cores, that lost -- the Session-mode
  # Transformer of benchmarks/mtf_port.py stepped 8-10% faster at 1 and 8
  # layers summing once, TrainStep the same within noise -- and across
  # processes it moves p-1 slices to every device instead of 2(p-1) in all.
  # TF's CollectiveReduceV2 was 1.6-3x slower than both, and cannot run
  # from eager mode, so it is not used.
  def _allreduce(self, x, mesh_axes, reduction):
    def combine(ts):
      if reduction == "SUM":
        return tf.add_n(ts)
      if reduction == "MAX":
        return tf.reduce_max(tf.stack(ts), 0)
      return tf.reduce_min(tf.stack(ts), 0)
    out = [None] * self.size
    for group, ts in self._group_lists(x, mesh_axes):
      with self._on(group[0]):
        total = combine(ts)
      out[group[0]] = total
      for p in group[1:]:
        with self._on(p):
          out[p] = tf.identity(total)
    return LaidOutTensor(x.slice_shape, x.dtype, out)

  def _allconcat(self, x, mesh_axes, concat_axis):
    out = [None] * self.size
    for group, ts in self._group_lists(x, mesh_axes, ordered=True):
      for p in group:
        with self._on(p):
          out[p] = tf.concat(ts, concat_axis)
    shape = list(x.slice_shape)
    shape[concat_axis] *= self._n(mesh_axes)
    return LaidOutTensor(shape, x.dtype, out)

  def _reduce_scatter(self, x, mesh_axes, split_axis):
    # Processor c of a group sums everyone's c-th part, on its own device.
    n = self._n(mesh_axes)
    out = [None] * self.size
    for group, ts in self._group_lists(x, mesh_axes, ordered=True):
      parts = []
      for p, t in zip(group, ts):
        with self._on(p):
          parts.append(tf.split(t, n, axis=split_axis))
      for c, p in enumerate(group):
        with self._on(p):
          out[p] = tf.add_n([parts[i][c] for i in range(n)])
    shape = list(x.slice_shape)
    shape[split_axis] //= n
    return LaidOutTensor(shape, x.dtype, out)

  def _alltoall(self, x, mesh_axes, split_axis, concat_axis):
    n = self._n(mesh_axes)
    out = [None] * self.size
    for group, ts in self._group_lists(x, mesh_axes, ordered=True):
      parts = []
      for p, t in zip(group, ts):
        with self._on(p):
          parts.append(tf.split(t, n, axis=split_axis))
      for j, p in enumerate(group):
        with self._on(p):
          out[p] = tf.concat([parts[i][j] for i in range(n)], concat_axis)
    shape = list(x.slice_shape)
    shape[split_axis] //= n
    shape[concat_axis] *= n
    return LaidOutTensor(shape, x.dtype, out)

  def _receive(self, x, mesh_axes, source_pcoord):
    out = [None] * self.size
    for group, ts in self._group_lists(x, mesh_axes, ordered=True):
      for c, p in enumerate(group):
        src = source_pcoord[c]
        with self._on(p):
          out[p] = (tf.zeros_like(ts[c]) if src is None
                    else tf.identity(ts[src]))
    return LaidOutTensor(x.slice_shape, x.dtype, out)

  def _slicewise(self, fn, inputs, outputs, with_pnum):
    if (not with_pnum and self.fuser is not None
        and self.fuser.defer(fn, inputs, outputs)):
      return
    results = []
    for p in range(self.size):
      args = [x.tensor_list[p] if isinstance(x, LaidOutTensor) else x
              for x in inputs]
      with self._on(p):
        r = fn(p, *args) if with_pnum else fn(*args)
      if len(outputs) == 1:
        r = [r]
      for o, t in zip(outputs, r):
        if tuple(t.shape) != o.slice_shape:
          raise AssertionError(f"slicewise kernel gave shape {t.shape}, "
                               f"expected {o.slice_shape}")
      results.append(list(r))
    for i, o in enumerate(outputs):
      o.tensor_list = [results[p][i] for p in range(self.size)]

  def _scalar_constant(self, value, dtype):
    if tf.executing_eagerly():
      cache = {}
    else:
      cache = self._scalars.setdefault(tf.compat.v1.get_default_graph(), {})
    key = (repr(value), dtype)
    if key not in cache:
      ts = []
      for p in range(self.size):
        with self._on(p):
          ts.append(tf.constant(value, dtype))
      cache[key] = LaidOutTensor((), dtype, ts)
    return cache[key]

  def _import(self, value, shape, slice_shape, dtype):
    if value is None:
      raise FeedError(
          f"operation {self._op_name} imports a tensor of {shape!r} without "
          "a value; feed one with Lowering(graph, impls, "
          "feeds={tensor: value})")
    full = tf.convert_to_tensor(value)
    if full.dtype.name != dtype:
      full = tf.cast(full, dtype)
    out = []
    for p in range(self.size):
      begin = self.slice_begin(shape, p)
      with self._on(p):
        if tuple(slice_shape) == tuple(shape.to_integer_list()):
          out.append(tf.identity(full))  # replicated (also 0-d values)
        else:
          out.append(tf.slice(full, begin, slice_shape))
    return LaidOutTensor(slice_shape, dtype, out)

  def export_to_tf_tensor(self, x, shape):
    """Concatenates the slices of ``x`` into the full tensor (not traced)."""
    x = x.to_laid_out_tensor()
    layout = self.tensor_layout(shape)
    ts = list(x.tensor_list)
    for ta, axes in enumerate(layout.tensor_axis_to_mesh_axes):
      axes = self._ordered_axes(axes)
      if not axes:
        continue
      new = list(ts)
      for group in self.groups.ordered(axes):
        with tf.device(self.devices[group[0]]):
          joined = tf.concat([ts[p] for p in group], ta)
        for p in group:
          new[p] = joined
      ts = new
    with self._on(0):
      return tf.identity(ts[0])

  def _make_variable(self, name, shape, slice_shape, dtype, initializer,
                     trainable):
    existing = self._variables.get(name)
    if existing is not None:
      return existing
    slices = []
    full = tuple(shape.to_integer_list())
    # Processors that hold the same slice (a replicated dim) share its
    # initial value: the initializer runs once per distinct slice.
    values = {}
    with tf.init_scope():
      for p in range(self.size):
        begin = self.slice_begin(shape, p)
        with self._on(p):
          if begin not in values:
            values[begin] = initializer(full, begin, slice_shape, dtype)
          init = values[begin]
          slices.append(tf.Variable(init, trainable=trainable,
                                    name=f"{name}_slice_{p}".replace(":", "_")))
    v = LaidOutVariable(name, shape, slice_shape, dtype, slices)
    self._variables[name] = v
    return v

  def laid_out_variable(self, name, shape, dtype):
    """The variable ``name`` made on this backend (see MeshImpl)."""
    v = self._variables.get(name)
    if v is None:
      raise MtfError(
          f"variable {name} of {shape!r} has not been created on this "
          "backend; lower its Variable op first (or create the step's "
          "variables), or pass variables={variable: laid_out} to "
          "lower_operation")
    return v

  @property
  def variables(self):
    """Laid-out variables created so far, by name."""
    return dict(self._variables)


def host_cores():
  """How many cores this process may run on (its CPU affinity)."""
  import os  # pylint: disable=g-import-not-at-top
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not on Linux
    return os.cpu_count() or 1


def cpu_thread_pools(n, cores):
  """``(inter_op, intra_op)`` thread counts for ``n`` logical CPU devices
  of one process sharing ``cores`` cores.

  TensorFlow runs the ready kernels of every logical CPU device of a process
  on one inter-op pool, and each kernel may split its work over the
  intra-op pool; by default both pools have a thread per core, so on a
  machine with fewer cores than devices up to twice as many threads as
  cores compete, a kernel's helper threads wait behind other devices'
  kernels.  With one inter-op thread per core and each kernel on its own
  thread (devices supply the parallelism), the cores run one kernel
  each.  Measured on 8 logical devices of a 2-core machine, the truth
  benchmark's Transformer and MLP steps ran 1.73x faster in the median
  (0.97-2.37x over 24 layouts; ``benchmarks/cpu_threads.py``); how much a
  step's time drifts from second to second did not change.  With fewer
  devices than cores each kernel keeps ``cores // n`` threads.

  Example:
    >>> cpu_thread_pools(8, 2), cpu_thread_pools(1, 2), cpu_thread_pools(2, 8)
    ((2, 1), (2, 2), (8, 4))
  """
  return max(1, cores), max(1, cores // max(1, n))


def set_logical_cpu_devices(n, share_cores=True):
  """Splits the host CPU into ``n`` TensorFlow logical devices; returns TF.

  For trying meshes on one machine.  Call it before TensorFlow initialises
  (before any op runs); it imports OR-Tools' CP-SAT before TensorFlow when
  available, the order the two need in one process.  ``share_cores``
  also sizes TensorFlow's thread pools for ``n`` devices on this host's
  cores (:func:`cpu_thread_pools`), unless ``TF_NUM_INTEROP_THREADS`` or
  ``TF_NUM_INTRAOP_THREADS`` is set; ``False`` keeps TensorFlow's.

  Raises:
    MeshSizeError: if TensorFlow already started with another device count.
  """
  import os  # pylint: disable=g-import-not-at-top
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  cpus = tf.config.list_physical_devices("CPU")
  try:
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * n)
  except RuntimeError as e:
    have = len(tf.config.list_logical_devices("CPU"))
    if have != n:
      raise MeshSizeError(
          f"TensorFlow already started with {have} logical CPU devices, so "
          f"{n} cannot be set; call set_logical_cpu_devices({n}) before "
          "running any TensorFlow op") from e
    return load_tensorflow()
  if share_cores and not (os.environ.get("TF_NUM_INTEROP_THREADS")
                          or os.environ.get("TF_NUM_INTRAOP_THREADS")):
    inter, intra = cpu_thread_pools(n, host_cores())
    tf.config.threading.set_inter_op_parallelism_threads(inter)
    tf.config.threading.set_intra_op_parallelism_threads(intra)
  return load_tensorflow()


def logical_cpu_devices(n=None):
  """Names of the first ``n`` local logical CPU devices."""
  devs = [d.name for d in tf.config.list_logical_devices("CPU")]
  if n is not None:
    if n > len(devs):
      raise MeshSizeError(
          f"{n} CPU devices requested but only {len(devs)} logical CPU devices "
          "exist; call tf.config.set_logical_device_configuration before "
          "TensorFlow initialises")
    devs = devs[:n]
  return devs
