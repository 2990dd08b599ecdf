"""Mesh TensorFlow's ``import_laid_out_tensor``, ``Print`` and
``scalar_summary``: ops whose lowering touches per-processor TF values
directly."""

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import MtfError, ShapeError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf

__all__ = ["ImportLaidOutTensorOperation", "Print", "PrintOperation",
           "ScalarSummaryOperation", "import_laid_out_tensor",
           "scalar_summary"]


class ImportLaidOutTensorOperation(Operation):
  """Brings in a tensor that is already laid out: one TF slice per
  processor, in pnum order, each of the slice shape the layout gives.

  Args:
    mesh: the Mesh.
    laid_out_tensor: a :class:`~mesh_tf.lowering.LaidOutTensor`, or a list
      of TF tensors (one per processor), or a callable ``(mesh_impl) ->``
      either of those, evaluated at lowering.
    shape: the mtf Shape of the full tensor.
    dtype: its dtype (default float32).
  """

  no_gradient_reason = "it has no inputs: its slices come from outside"

  @property
  def unsplittable_dims(self):
    """Every dim, as Mesh TF defines it."""
    return frozenset(self.outputs[0].shape.dimension_names)

  @property
  def lowering_unsplittable_dims(self):
    """None: the slices come laid out as the layout says."""
    return frozenset()

  def __init__(self, mesh, laid_out_tensor, shape, dtype=None, name=None):
    super().__init__([], mesh=mesh, name=name or "import_laid_out_tensor")
    self.laid_out_tensor = laid_out_tensor
    self._outputs = [Tensor(self, dims_lib.convert_to_shape(shape),
                            dtypes_lib.as_dtype(dtype))]

  def lower(self, lowering):
    from mesh_tf.lowering.mesh_impl import LaidOutTensor  # pylint: disable=g-import-not-at-top
    impl = lowering.mesh_impl(self)
    out = self.outputs[0]
    value = self.laid_out_tensor
    if callable(value):
      value = value(impl)
    if isinstance(value, LaidOutTensor):
      slices = value.tensor_list
    else:
      slices = list(value)
    if len(slices) != impl.size:
      raise MtfError(f"{self.name}: {len(slices)} slices for a mesh of "
                     f"{impl.size} processors; give one per processor")
    want = impl.slice_shape(out)
    for p, t in enumerate(slices):
      if tuple(t.shape) != want:
        raise ShapeError(f"{self.name}: slice {p} has shape {tuple(t.shape)}"
                         f" but {out.shape!r} laid out by the rules gives "
                         f"{want}")
    lowering.set_tensor_lowering(out, LaidOutTensor(want, out.dtype, slices))


def import_laid_out_tensor(mesh, laid_out_tensor, shape, name=None,
                           dtype=None):
  """An mtf Tensor whose per-processor slices are given (Mesh TF's op)."""
  return ImportLaidOutTensorOperation(mesh, laid_out_tensor, shape, dtype,
                                      name=name).outputs[0]


class _PrintKernel:
  __slots__ = ("message", "summarize")

  def __init__(self, message, summarize):
    self.message, self.summarize = message, summarize

  def __call__(self, pnum, x, *data):
    if pnum != 0:  # one processor prints, the others pass x through
      return tf.identity(x)
    printed = tf.print(self.message, *data, summarize=self.summarize)
    with tf.control_dependencies([printed]):
      return tf.identity(x)


class PrintOperation(Operation):
  """``x``, printing ``data`` (processor 0's slices) when it is computed.

  Mesh TF's ``Print``: the tensors are printed slice by slice as processor
  0 holds them; use a replicating layout to print whole values.
  """

  def __init__(self, x, data, message, summarize=3, name=None):
    data = list(data)
    super().__init__([x] + data, name=name or "Print")
    self.message, self.summarize = str(message), int(summarize)
    self._outputs = [Tensor(self, x.shape, x.dtype)]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    kernel = _PrintKernel(self.message, self.summarize)
    lowering.set_tensor_lowering(self.outputs[0], impl.slicewise_pnum(
        kernel, *[lowering.laid_out(t) for t in self.inputs],
        shape=self.outputs[0].shape, flops=0))

  def gradient(self, grad_ys):
    return [grad_ys[0]] + [None] * (len(self.inputs) - 1)


def Print(x, data, message, **kwargs):  # pylint: disable=invalid-name
  """``x``, printing ``data`` with ``message`` when computed (Mesh TF's
  ``mtf.Print``)."""
  return PrintOperation(x, data, message, **kwargs).outputs[0]


class ScalarSummaryOperation(Operation):
  """Records a scalar as a ``tf.compat.v1.summary.scalar`` (graph mode).

  It has no outputs; its lowered operation is the summary tensor, which
  also joins the graph's ``SUMMARIES`` collection (so
  ``tf.compat.v1.summary.merge_all()`` and summary hooks find it).
  """

  no_gradient_reason = "it has no outputs"

  def __init__(self, name, x):
    if x.shape.ndims != 0:
      raise ShapeError(f"scalar_summary {name!r}: {x.name} has shape "
                       f"{x.shape!r}; reduce it to a scalar first")
    super().__init__([x], name=f"summary/{name}")
    self.summary_name = name

  def lower(self, lowering):
    laid = lowering.laid_out(self.inputs[0])
    if laid.tensor_list is None:  # the shape-only backend
      lowering.lowered_operations[self] = []
      return
    if tf.executing_eagerly():
      raise MtfError(f"scalar_summary {self.summary_name!r} writes a "
                     "tf.compat.v1 summary; lower it in a tf.compat.v1 "
                     "graph, or export the value and use tf.summary")
    value = tf.cast(laid.tensor_list[0], tf.float32)  # replicated scalar
    lowering.lowered_operations[self] = [
        tf.compat.v1.summary.scalar(self.summary_name, value)]


def scalar_summary(name, x):
  """Records scalar ``x`` as a TF summary named ``name`` (Mesh TF's
  ``mtf.scalar_summary``); returns the op."""
  return ScalarSummaryOperation(name, x)
