"""Training on a mesh: the step, its optimizers and how its state is stored.

* :mod:`~mesh_tf.training.step`: :class:`TrainStep`, one ``tf.function`` per
  step (forward, backward, update), with variables that live on the mesh.
* :mod:`~mesh_tf.training.optimize`: SGD, momentum, Adam and Adafactor
  (``mtf.optimize`` in Mesh TF); :mod:`~mesh_tf.training.lr_schedule`: the
  learning-rate schedules they take.
* :mod:`~mesh_tf.training.microbatch`: one step as ``k`` microbatches.
* :mod:`~mesh_tf.training.storage`: ZeRO / FSDP storage of weights,
  gradients and optimizer state.
* :mod:`~mesh_tf.training.padding`: a data-parallel dim padded up to a
  size the mesh splits, its padded rows masked out of the loss.

``from mesh_tf import training; training.TrainStep(...)`` is the entry point.
"""

from mesh_tf.training.padding import Padding, PaddingError, padding_for
from mesh_tf.training.step import (TrainStep, make_train_step,
                                   train_step_for_model)

__all__ = ["Padding", "PaddingError", "TrainStep", "make_train_step",
           "padding_for", "train_step_for_model"]
