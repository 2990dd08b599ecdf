"""Optimizers: SGD, momentum, Adam with weight decay, and Adafactor.

Each optimizer turns ``(grads, variables)`` into mtf assign ops.  Updates are
ordinary mtf ops, so they are laid out by the same rules as the model; slot
variables (momentum, Adam moments, Adafactor's factored second moments) take
their dims from their variable, so they are split exactly like it, on any
layout, with no extra rule.

Building the update needs no TensorFlow.  The names follow Mesh TensorFlow.

Example:
  >>> grads = mtf.gradients([loss], graph.trainable_variables)  # doctest: +SKIP
  >>> opt = AdafactorOptimizer()                                 # doctest: +SKIP
  >>> update_ops = opt.apply_grads(grads, graph.trainable_variables)
"""

import re

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import MtfError
from mesh_tf.graph import Tensor
from mesh_tf.ops import creation as creation_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import reduce as reduce_ops
from mesh_tf.ops import variables as variable_ops

__all__ = ["AdafactorOptimizer", "AdamWeightDecayOptimizer",
           "MomentumOptimizer", "Optimizer", "SgdOptimizer"]


def _as_variable(v):
  if isinstance(v, variable_ops.Variable):
    return v
  if isinstance(v, Tensor) and isinstance(v.operation, variable_ops.Variable):
    return v.operation
  raise MtfError(f"optimizers update variables; {v!r} is not one")


def _slot(var, suffix, shape=None):
  """A zero-initialised, non-trainable slot variable named after ``var``."""
  return variable_ops.get_variable(
      var.mesh, f"{var.name}/{suffix}", var.shape if shape is None else shape,
      var.dtype, initializer=variable_ops.zeros_initializer(),
      trainable=False)


def reduce_rms(x):
  """Root mean square of all elements of ``x`` (a scalar Tensor)."""
  return ew.sqrt(reduce_ops.reduce_mean(ew.square(x)))


class Optimizer:
  """Base class.  Subclasses implement :meth:`apply_grad`."""

  def apply_grads(self, grads, variables):
    """Returns the list of assign ops that apply ``grads`` to ``variables``.

    Args:
      grads: one gradient Tensor (or None, skipped) per variable, e.g. from
        ``mtf.gradients``.
      variables: Variable ops or their value Tensors.

    Raises:
      MtfError: if the lists differ in length or a gradient's shape is not its
        variable's.
    """
    grads, variables = list(grads), [_as_variable(v) for v in variables]
    if len(grads) != len(variables):
      raise MtfError(f"apply_grads got {len(grads)} gradients for "
                     f"{len(variables)} variables")
    ops = []
    for g, v in zip(grads, variables):
      if g is None:
        continue
      if g.shape != v.shape:
        raise MtfError(f"gradient {g.name} {g.shape!r} does not match "
                       f"variable {v.name} {v.shape!r}")
      ops.extend(self.apply_grad(g, v))
    return ops

  def apply_grad(self, grad, var):
    """Returns the assign ops that update ``var`` (a Variable) by ``grad``."""
    raise NotImplementedError


class SgdOptimizer(Optimizer):
  """Plain gradient descent: ``var -= lr * grad``.

  ``lr`` is a float or a scalar mtf Tensor (e.g. a schedule).
  """

  def __init__(self, lr):
    self.lr = lr

  def apply_grad(self, grad, var):
    return [variable_ops.apply_gradient_descent(var, grad, self.lr)]


class MomentumOptimizer(Optimizer):
  """Heavy-ball momentum, as ``tf.compat.v1.train.MomentumOptimizer``:
  ``m = momentum * m + grad; var -= lr * m``."""

  def __init__(self, learning_rate, momentum):
    self.learning_rate = learning_rate
    self.momentum = momentum

  def apply_grad(self, grad, var):
    m = _slot(var, "momentum")
    new_m = ew.add(ew.multiply(m, self.momentum), grad)
    return [variable_ops.assign(m, new_m),
            variable_ops.assign_sub(var, ew.multiply(new_m,
                                                     self.learning_rate))]


class AdamWeightDecayOptimizer(Optimizer):
  """Adam with decoupled weight decay, as in BERT and Mesh TensorFlow.

  ``m = b1 m + (1-b1) g``; ``v = b2 v + (1-b2) g^2``;
  ``update = m / (sqrt(v) + eps) + weight_decay_rate * var``;
  ``var -= learning_rate * update``.  There is no bias correction.

  Args:
    exclude_from_weight_decay: regexes; variables whose name matches one get
      no weight decay (e.g. ``["layer_norm", "bias"]``).
  """

  def __init__(self, learning_rate, weight_decay_rate=0.0, beta_1=0.9,
               beta_2=0.999, epsilon=1e-6, exclude_from_weight_decay=None):
    self.learning_rate = learning_rate
    self.weight_decay_rate = weight_decay_rate
    self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
    self.exclude_from_weight_decay = list(exclude_from_weight_decay or [])

  def _use_weight_decay(self, name):
    if not self.weight_decay_rate:
      return False
    return not any(re.search(r, name) for r in self.exclude_from_weight_decay)

  def apply_grad(self, grad, var):
    m = _slot(var, "adam_m")
    v = _slot(var, "adam_v")
    new_m = ew.add(ew.multiply(m, self.beta_1),
                   ew.multiply(grad, 1.0 - self.beta_1))
    new_v = ew.add(ew.multiply(v, self.beta_2),
                   ew.multiply(ew.square(grad), 1.0 - self.beta_2))
    update = ew.divide(new_m, ew.add(ew.sqrt(new_v), self.epsilon))
    if self._use_weight_decay(var.name):
      update = ew.add(update, ew.multiply(var.value, self.weight_decay_rate))
    return [variable_ops.assign(m, new_m), variable_ops.assign(v, new_v),
            variable_ops.assign_sub(var, ew.multiply(update,
                                                     self.learning_rate))]


class AdafactorOptimizer(Optimizer):
  """Adafactor (Shazeer & Stern, 2018), with Mesh TensorFlow's defaults.

  For a variable with at least two dims whose second-largest dim has at least
  ``min_dim_size_to_factor`` elements, the second moment is factored: it
  keeps a "row" accumulator (mean over the largest dim) and a "column"
  accumulator (mean over the second-largest), instead of a full copy.  With
  ``t`` the 1-based step:

  * ``decay = 1 - t^-decay_exponent`` (unless ``decay_rate`` is given: a
    number, or a function of the step Tensor ``t`` such as
    :func:`adafactor_decay_rate_adam`; ``learning_rate`` may be one too);
  * ``lr = min(0.01, 1/sqrt(t))`` (unless ``learning_rate`` is given), times
    ``max(epsilon2, rms(var))`` if ``multiply_by_parameter_scale``;
  * ``x = grad / sqrt(V)``, clipped so that ``rms(x) <= clipping_threshold``;
  * with ``beta1 > 0``, ``x`` is averaged into a first-moment slot;
  * ``var -= lr * x``.

  The step counter is a scalar non-trainable variable ``<name>/step``.
  """

  def __init__(self, multiply_by_parameter_scale=True, learning_rate=None,
               decay_rate=None, beta1=0.0, clipping_threshold=1.0,
               factored=True, epsilon1=1e-30, epsilon2=1e-3,
               min_dim_size_to_factor=128, decay_exponent=0.8,
               name="adafactor"):
    self.multiply_by_parameter_scale = multiply_by_parameter_scale
    self.learning_rate = learning_rate
    self.decay_rate = decay_rate
    self.beta1 = beta1
    self.clipping_threshold = clipping_threshold
    self.factored = factored
    self.epsilon1, self.epsilon2 = epsilon1, epsilon2
    self.min_dim_size_to_factor = min_dim_size_to_factor
    self.decay_exponent = decay_exponent
    self.name = name

  def factored_dims(self, shape):
    """The (largest, second-largest) dims to factor over, or None."""
    shape = dims_lib.convert_to_shape(shape)
    if not self.factored or shape.ndims < 2:
      return None
    ordered = sorted(shape.dims, key=lambda d: -d.size)
    if ordered[1].size < self.min_dim_size_to_factor:
      return None
    return ordered[0], ordered[1]

  def apply_grads(self, grads, variables):
    variables = [_as_variable(v) for v in variables]
    if not variables:
      return []
    mesh = variables[0].mesh
    step = variable_ops.get_variable(
        mesh, f"{self.name}/step", dims_lib.Shape([]), "float32",
        initializer=variable_ops.zeros_initializer(), trainable=False)
    t = ew.add(step, 1.0)
    if self.decay_rate is None:
      self._decay = ew.subtract(1.0, ew.pow(t, -self.decay_exponent))
    elif callable(self.decay_rate):  # a schedule of the 1-based step t
      self._decay = self.decay_rate(t)
    else:
      self._decay = self.decay_rate
    if callable(self.learning_rate):
      self._lr = self.learning_rate(t)
    elif self.learning_rate is None:
      self._lr = ew.minimum(ew.rsqrt(t), 0.01)
      if not self.multiply_by_parameter_scale:
        self._lr = ew.multiply(self._lr, 0.05)
    else:
      self._lr = self.learning_rate
    ops = super().apply_grads(grads, variables)
    ops.append(variable_ops.assign_add(step, creation_ops.ones_like(step)))
    return ops

  def apply_grad(self, grad, var):
    decay = self._decay
    keep = 1.0 - decay if not isinstance(decay, Tensor) else ew.subtract(
        1.0, decay)
    grad_sq = ew.add(ew.square(grad), self.epsilon1)
    ops = []
    dims = self.factored_dims(var.shape)
    if dims is not None:
      d0, d1 = dims
      vr = _slot(var, "adafactor_vr", var.shape - [d0])
      vc = _slot(var, "adafactor_vc", var.shape - [d1])
      new_vr = ew.add(ew.multiply(vr, decay), ew.multiply(
          reduce_ops.reduce_mean(grad_sq, output_shape=vr.shape), keep))
      new_vc = ew.add(ew.multiply(vc, decay), ew.multiply(
          reduce_ops.reduce_mean(grad_sq, output_shape=vc.shape), keep))
      ops += [variable_ops.assign(vr, new_vr), variable_ops.assign(vc,
                                                                   new_vc)]
      # vr averages over d0 and vc over d1, so V[i, j] ~ vr[j] vc[i] / mean(vr)
      # where the mean is over d1 (the mean of the whole second moment).
      long_term_mean = reduce_ops.reduce_mean(new_vr, reduced_dim=[d1])
      r_factor = ew.rsqrt(ew.divide(new_vr, long_term_mean))
      c_factor = ew.rsqrt(new_vc)
      x = ew.multiply(ew.multiply(grad, r_factor), c_factor)
    else:
      v = _slot(var, "adafactor_v")
      new_v = ew.add(ew.multiply(v, decay), ew.multiply(grad_sq, keep))
      ops.append(variable_ops.assign(v, new_v))
      x = ew.multiply(grad, ew.rsqrt(new_v))
    if self.clipping_threshold is not None:
      denom = ew.maximum(ew.divide(reduce_rms(x), self.clipping_threshold),
                         1.0)
      x = ew.divide(x, denom)
    scale = self._lr
    if self.multiply_by_parameter_scale:
      scale = ew.multiply(ew.maximum(reduce_rms(var.value), self.epsilon2),
                          scale)
    if self.beta1:
      m = _slot(var, "adafactor_m")
      new_m = ew.add(ew.multiply(m, self.beta1),
                     ew.multiply(x, 1.0 - self.beta1))
      ops.append(variable_ops.assign(m, new_m))
      x = new_m
    ops.append(variable_ops.assign_sub(var, ew.multiply(x, scale)))
    return ops


# Mesh TF's schedule helpers and optimizer factories (they use the classes
# above, so they are imported last).
from mesh_tf.optimize_schedules import *  # noqa: E402,F401,F403  pylint: disable=wildcard-import,g-import-not-at-top
