"""Mesh TensorFlow's Adafactor decay-rate helpers and optimizer factories
(``mtf.optimize.adafactor_decay_rate_adam``, ``make_optimizer``...).

A decay rate here is a function of the 1-based step ``t`` (a scalar mtf
Tensor that :class:`~mesh_tf.optimize.AdafactorOptimizer` keeps), because
mesh-tf has no global step.
"""

from mesh_tf.core.errors import MtfError
from mesh_tf.ops import elementwise as ew

__all__ = ["adafactor_decay_rate_adam", "adafactor_decay_rate_pow",
           "adafactor_optimizer_from_hparams", "make_optimizer"]


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
  """An :class:`~mesh_tf.optimize.AdafactorOptimizer` from tensor2tensor-
  style hparams (``optimizer_adafactor_decay_type`` "adam" or "pow",
  ``optimizer_adafactor_beta1``, ``_beta2``, ``_memory_exponent``,
  ``_clipping_threshold``, ``_factored``,
  ``_multiply_by_parameter_scale``).

  Raises:
    MtfError: for another decay type.
  """
  from mesh_tf.optimize import AdafactorOptimizer  # pylint: disable=g-import-not-at-top
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
  from mesh_tf.optimize import SgdOptimizer  # pylint: disable=g-import-not-at-top
  name = str(hparams.optimizer).lower()
  if name == "sgd":
    return SgdOptimizer(lr)
  if name == "adafactor":
    return adafactor_optimizer_from_hparams(hparams, lr)
  raise MtfError(f"unknown optimizer {hparams.optimizer!r}; use 'SGD' or "
                 "'Adafactor'")
