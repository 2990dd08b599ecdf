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

import dataclasses
import re
from typing import Any, Optional, Tuple

from mesh_tf.core import dims as dims_lib
from mesh_tf.training import lr_schedule
from mesh_tf.core.errors import MtfError
from mesh_tf.graph import Tensor
from mesh_tf.ops import creation as creation_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import reduce as reduce_ops
from mesh_tf.ops import variables as variable_ops

__all__ = ["AdafactorOptimizer", "AdafactorWithMultiLRSchedule",
           "AdamWeightDecayOptimizer", "AdamWithMultiLRSchedule",
           "MomentumOptimizer", "Optimizer", "SgdOptimizer",
           "adafactor_decay_rate_adam", "adafactor_decay_rate_pow",
           "adafactor_optimizer_from_hparams", "compute_lr_for_step",
           "make_optimizer", "product_learning_rate", "reduce_rms"]

# Mesh TF's schedule helpers live in their own module; these are its names.
compute_lr_for_step = lr_schedule.compute_lr_for_step
product_learning_rate = lr_schedule.product_learning_rate


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


def _pairs(grads, variables):
  """The checked ``(gradient, Variable)`` pairs, None gradients skipped."""
  grads, variables = list(grads), [_as_variable(v) for v in variables]
  if len(grads) != len(variables):
    raise MtfError(f"apply_grads got {len(grads)} gradients for "
                   f"{len(variables)} variables")
  for g, v in zip(grads, variables):
    if g is None:
      continue
    if g.shape != v.shape:
      raise MtfError(f"gradient {g.name} {g.shape!r} does not match "
                     f"variable {v.name} {v.shape!r}")
    yield g, v


def reduce_rms(x):
  """Root mean square of all elements of ``x`` (a scalar Tensor)."""
  return ew.sqrt(reduce_ops.reduce_mean(ew.square(x)))


def _optimizer(cls):
  """Optimizers are frozen dataclasses: their hyperparameters are the whole
  of their state, compared and hashed as values."""
  return dataclasses.dataclass(frozen=True)(cls)


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
    ops = []
    for g, v in _pairs(grads, variables):
      ops.extend(self.apply_grad(g, v))
    return ops

  def apply_grad(self, grad, var):
    """Returns the assign ops that update ``var`` (a Variable) by ``grad``."""
    raise NotImplementedError


@_optimizer
class SgdOptimizer(Optimizer):
  """Plain gradient descent: ``var -= lr * grad``.

  ``lr`` is a float or a scalar mtf Tensor (e.g. a schedule).
  """
  lr: Any

  def apply_grad(self, grad, var):
    return [variable_ops.apply_gradient_descent(var, grad, self.lr)]


@_optimizer
class MomentumOptimizer(Optimizer):
  """Heavy-ball momentum, as ``tf.compat.v1.train.MomentumOptimizer``:
  ``m = momentum * m + grad; var -= lr * m``."""
  learning_rate: Any
  momentum: float

  def apply_grad(self, grad, var):
    m = _slot(var, "momentum")
    new_m = ew.add(ew.multiply(m, self.momentum), grad)
    return [variable_ops.assign(m, new_m),
            variable_ops.assign_sub(var, ew.multiply(new_m,
                                                     self.learning_rate))]


@_optimizer
class AdamWeightDecayOptimizer(Optimizer):
  """Adam with decoupled weight decay, as in BERT and Mesh TensorFlow.

  ``m = b1 m + (1-b1) g``; ``v = b2 v + (1-b2) g^2``;
  ``update = m / (sqrt(v) + eps) + weight_decay_rate * var``;
  ``var -= learning_rate * update``.  There is no bias correction.

  Args:
    exclude_from_weight_decay: regexes; variables whose name matches one get
      no weight decay (e.g. ``["layer_norm", "bias"]``).
  """

  learning_rate: Any
  weight_decay_rate: float = 0.0
  beta_1: float = 0.9
  beta_2: float = 0.999
  epsilon: float = 1e-6
  exclude_from_weight_decay: Tuple[str, ...] = ()

  def __post_init__(self):
    object.__setattr__(self, "exclude_from_weight_decay",
                       tuple(self.exclude_from_weight_decay or ()))

  def _use_weight_decay(self, name):
    if not self.weight_decay_rate:
      return False
    return not any(re.search(r, name) for r in self.exclude_from_weight_decay)

  def apply_grad(self, grad, var):
    return self._update(grad, var, self.learning_rate)

  def _update(self, grad, var, learning_rate):
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
            variable_ops.assign_sub(var, ew.multiply(update, learning_rate))]


@_optimizer
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

  multiply_by_parameter_scale: bool = True
  learning_rate: Optional[Any] = None
  decay_rate: Optional[Any] = None
  beta1: float = 0.0
  clipping_threshold: Optional[float] = 1.0
  factored: bool = True
  epsilon1: float = 1e-30
  epsilon2: float = 1e-3
  min_dim_size_to_factor: int = 128
  decay_exponent: float = 0.8
  name: str = "adafactor"

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
      decay = ew.subtract(1.0, ew.pow(t, -self.decay_exponent))
    elif callable(self.decay_rate):  # a schedule of the 1-based step t
      decay = self.decay_rate(t)
    else:
      decay = self.decay_rate
    if callable(self.learning_rate):
      lr = self.learning_rate(t)
    elif self.learning_rate is None:
      lr = ew.minimum(ew.rsqrt(t), 0.01)
      if not self.multiply_by_parameter_scale:
        lr = ew.multiply(lr, 0.05)
    else:
      lr = self.learning_rate
    rate_of = self._group_rates(lr, step)
    ops = []
    for g, v in _pairs(grads, variables):
      ops.extend(self._update(g, v, decay, rate_of(v.name)))
    ops.append(variable_ops.assign_add(step, creation_ops.ones_like(step)))
    return ops

  def _group_rates(self, lr, step):
    """``variable name -> learning rate``; one rate for all here."""
    del step  # only schedules per variable group read it
    return lambda name: lr

  def apply_grad(self, grad, var):
    """Adafactor's decay and learning rate depend on the shared step
    counter, which :meth:`apply_grads` creates once for all variables."""
    raise MtfError(
        f"AdafactorOptimizer updates variables together, around one step "
        f"counter; call apply_grads([grad], [{var.name!r}]) instead of "
        "apply_grad")

  def _update(self, grad, var, decay, lr):
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
    scale = lr
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



# --- Mesh TF's decay-rate helpers and optimizer factories --------------------
# A decay rate here is a function of the 1-based step ``t`` (a scalar mtf
# Tensor that AdafactorOptimizer keeps), because mesh-tf has no global step.
def adafactor_decay_rate_adam(beta2):
  """Adam's second-moment decay with bias correction folded in:
  ``beta2 * (1 - beta2^(t-1)) / (1 - beta2^t)``."""
  def decay(t):
    return ew.divide(ew.multiply(ew.subtract(1.0, ew.pow(beta2, t - 1.0)),
                                 beta2),
                     ew.subtract(1.0, ew.pow(beta2, t)))
  return decay


def adafactor_decay_rate_pow(exponent):
  """``1 - t^-exponent`` (Adafactor's default with ``exponent=0.8``)."""
  def decay(t):
    return ew.subtract(1.0, ew.pow(t, -float(exponent)))
  return decay


def adafactor_optimizer_from_hparams(hparams, lr):
  """An :class:`~mesh_tf.training.optimize.AdafactorOptimizer` from tensor2tensor-
  style hparams (``optimizer_adafactor_decay_type`` "adam" or "pow",
  ``optimizer_adafactor_beta1``, ``_beta2``, ``_memory_exponent``,
  ``_clipping_threshold``, ``_factored``,
  ``_multiply_by_parameter_scale``).

  Raises:
    MtfError: for another decay type.
  """
  kind = str(hparams.optimizer_adafactor_decay_type).lower()
  if kind == "adam":
    decay = adafactor_decay_rate_adam(hparams.optimizer_adafactor_beta2)
  elif kind == "pow":
    decay = adafactor_decay_rate_pow(
        hparams.optimizer_adafactor_memory_exponent)
  else:
    raise MtfError(f"unknown optimizer_adafactor_decay_type {kind!r}; use "
                   "'adam' or 'pow'")
  return AdafactorOptimizer(
      multiply_by_parameter_scale=(
          hparams.optimizer_adafactor_multiply_by_parameter_scale),
      learning_rate=lr, decay_rate=decay,
      beta1=hparams.optimizer_adafactor_beta1,
      clipping_threshold=hparams.optimizer_adafactor_clipping_threshold,
      factored=hparams.optimizer_adafactor_factored)


def make_optimizer(hparams, lr):
  """The optimizer named by ``hparams.optimizer`` ("SGD" or "Adafactor").

  Raises:
    MtfError: for another name.
  """
  name = str(hparams.optimizer).lower()
  if name == "sgd":
    return SgdOptimizer(lr)
  if name == "adafactor":
    return adafactor_optimizer_from_hparams(hparams, lr)
  raise MtfError(f"unknown optimizer {hparams.optimizer!r}; use 'SGD' or "
                 "'Adafactor'")


# --- One learning-rate schedule per group of variables (Mesh TF's names) ----
_GROUP_FIELDS_DOC = """
  Args:
    variable_search: regexes (``re.search`` on the variable name), one per
      group; a variable takes the first group it matches.
    alt_lr_schedules: one schedule per regex: None (the optimizer's own
      learning rate) or a list of factors, numbers and functions
      ``f(step, total_train_steps)`` (:func:`product_learning_rate`).
    train_steps: ``total_train_steps`` given to the factors.
    **kwargs: the base optimizer's hyperparameters.

  ``step`` is the number of updates applied before this one (0 first), read
  from the scalar step counter ``<name>/step``.  With neither
  ``variable_search`` nor ``alt_lr_schedules`` the optimizer is its base.

  Raises:
    MtfError: if only one of the two lists is given, their lengths differ,
      or a regex does not compile.
"""


def _init_groups(self, owner, variable_search, alt_lr_schedules,
                 train_steps):
  patterns, schedules = lr_schedule.check_variable_groups(
      variable_search, alt_lr_schedules, owner)
  object.__setattr__(self, "variable_search", patterns)
  object.__setattr__(self, "alt_lr_schedules", schedules)
  object.__setattr__(self, "train_steps", train_steps)


@dataclasses.dataclass(frozen=True, init=False)
class AdafactorWithMultiLRSchedule(AdafactorOptimizer):
  __doc__ = ("Adafactor whose variable groups have their own learning-rate "
             "schedules.\n" + _GROUP_FIELDS_DOC)
  variable_search: Optional[Tuple[str, ...]] = None
  alt_lr_schedules: Optional[Tuple[Any, ...]] = None
  train_steps: int = lr_schedule.DEFAULT_TRAIN_STEPS

  def __init__(self, variable_search=None, alt_lr_schedules=None,
               train_steps=lr_schedule.DEFAULT_TRAIN_STEPS, **kwargs):
    super().__init__(**kwargs)
    _init_groups(self, "AdafactorWithMultiLRSchedule", variable_search,
                 alt_lr_schedules, train_steps)

  def _group_rates(self, lr, step):
    return lr_schedule.group_rates(self.variable_search,
                                   self.alt_lr_schedules, lr,
                                   self.train_steps, step)


@dataclasses.dataclass(frozen=True, init=False)
class AdamWithMultiLRSchedule(AdamWeightDecayOptimizer):
  __doc__ = ("Adam with weight decay whose variable groups have their own "
             "learning-rate schedules.\n" + _GROUP_FIELDS_DOC +
             "\n  The step counter is made only when groups are given.\n")
  variable_search: Optional[Tuple[str, ...]] = None
  alt_lr_schedules: Optional[Tuple[Any, ...]] = None
  train_steps: int = lr_schedule.DEFAULT_TRAIN_STEPS
  name: str = "adam"

  def __init__(self, variable_search=None, alt_lr_schedules=None,
               train_steps=lr_schedule.DEFAULT_TRAIN_STEPS, name="adam",
               **kwargs):
    super().__init__(**kwargs)
    _init_groups(self, "AdamWithMultiLRSchedule", variable_search,
                 alt_lr_schedules, train_steps)
    object.__setattr__(self, "name", name)

  def apply_grads(self, grads, variables):
    variables = [_as_variable(v) for v in variables]
    if self.variable_search is None or not variables:
      return super().apply_grads(grads, variables)
    step = variable_ops.get_variable(
        variables[0].mesh, f"{self.name}/step", dims_lib.Shape([]),
        "float32", initializer=variable_ops.zeros_initializer(),
        trainable=False)
    rate_of = lr_schedule.group_rates(self.variable_search,
                                      self.alt_lr_schedules,
                                      self.learning_rate, self.train_steps,
                                      step)
    ops = []
    for g, v in _pairs(grads, variables):
      ops.extend(self._update(g, v, rate_of(v.name)))
    ops.append(variable_ops.assign_add(step, creation_ops.ones_like(step)))
    return ops

  def apply_grad(self, grad, var):
    """Without groups, the base update; with them, the rates depend on the
    shared step counter that :meth:`apply_grads` creates once."""
    if self.variable_search is None:
      return super().apply_grad(grad, var)
    raise MtfError(
        f"AdamWithMultiLRSchedule with variable groups updates variables "
        f"together, around one step counter; call apply_grads([grad], "
        f"[{var.name!r}]) instead of apply_grad")
