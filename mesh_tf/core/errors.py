"""The one exception hierarchy of mesh-tf.

Every public error is a subclass of :class:`MtfError` (itself a ``ValueError``
so that code written against the original Mesh TensorFlow, which raised
``ValueError``, keeps working).  Messages name the op, tensor, dim
(``name=size``) and mesh axis (``name=size``) involved, and say what to change.
"""


class MtfError(ValueError):
  """Base class of every error raised by mesh-tf."""


class ParseError(MtfError):
  """A shape, mesh shape or layout-rules string could not be parsed."""


class ShapeError(MtfError):
  """Tensor shapes are inconsistent for an operation."""


class UnknownNameError(MtfError):
  """A dim name or mesh-axis name does not exist where it is used."""


class LayoutError(MtfError):
  """A layout is invalid for some tensor or operation."""


class DimMappedTwiceError(LayoutError):
  """Layout rules map one tensor dim to more than one mesh axis."""


class MeshAxisReuseError(LayoutError):
  """Two dims of one tensor map to the same mesh axis."""


class IndivisibleDimError(LayoutError):
  """A dim's size is not divisible by the size of the mesh axis it maps to."""


class UnsplittableDimError(LayoutError):
  """An operation's unsplittable dim is split by the layout."""


class MultiAxisDimError(LayoutError):
  """A dim split over several mesh axes reached code that handles one axis
  per dim (a single-axis accessor, or an op that cannot lower it)."""


class MeshSizeError(MtfError):
  """The mesh size does not equal the number of devices given."""


class DTypeError(MtfError):
  """An unknown or unsupported dtype."""


class FeedError(MtfError):
  """An imported tensor has no value and none was fed at lowering time."""


class InvalidArgumentError(MtfError):
  """An argument of a public function has the wrong type or a value out of
  range; the message names the argument and a valid value."""
