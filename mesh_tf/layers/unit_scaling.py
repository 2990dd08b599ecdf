"""Mesh TensorFlow's unit-scaling convention: ``unit_scaling_convention``
and ``us_einsum``.

Under the convention, weights start with unit variance and a contraction
divides its output by the square root of the product of the sizes of the
dims it sums out, so activations keep their scale without scaled
initializers.  The original switched it on globally with gin; mesh-tf keeps
no global switches, so ``us_einsum`` takes it as an argument.
"""

import math

from mesh_tf.ops import einsum as einsum_ops
from mesh_tf.ops import elementwise as ew

__all__ = ["unit_scaling_convention", "us_einsum"]


def unit_scaling_convention(value=False):
  """Whether the unit-scaling convention is on: ``value`` itself.

  The original's body was the same; gin bound ``value``.  Pass the result to
  :func:`us_einsum` as ``unit_scaling``.
  """
  return bool(value)


def us_einsum(xs, *args, unit_scaling=False, **kwargs):
  """:func:`mesh_tf.einsum` of ``xs``, divided by ``sqrt(n)`` under the
  unit-scaling convention (``n``: the product of the sizes of the input dims
  missing from the output).

  Args:
    xs: list of Tensors.
    *args, **kwargs: as :func:`mesh_tf.einsum` takes them.
    unit_scaling: apply the convention (default off, as the original's
      default).

  Example:
    >>> import mesh_tf as mtf
    >>> mesh = mtf.Mesh(mtf.Graph(), "m")
    >>> x, w = mtf.ones(mesh, "b:2;d:16"), mtf.ones(mesh, "d:16;h:3")
    >>> us_einsum([x, w], mtf.Shape(x.shape.dims[:1] + w.shape.dims[1:]),
    ...           unit_scaling=True).shape
    Shape[b=2, h=3]
  """
  y = einsum_ops.einsum(xs, *args, **kwargs)
  if not unit_scaling:
    return y
  out = set(y.shape.dimension_names)
  reduced = {d.name: d.size for x in xs for d in x.shape.dims
             if d.name not in out}
  n = math.prod(reduced.values())
  return ew.multiply(y, n ** -0.5) if n > 1 else y
