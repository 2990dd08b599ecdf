"""Training on a mesh: the step, its optimizers and how its state is stored.

* :mod:`~mesh_tf.training.step`: :class:`TrainStep`, one ``tf.function`` per
  step (forward, backward, update), with variables that live on the mesh.
* :mod:`~mesh_tf.training.optimize`: SGD, momentum, Adam and Adafactor
  (``mtf.optimize`` in Mesh TF); :mod:`~mesh_tf.training.lr_schedule`: the
  learning-rate schedules they take.
* :mod:`~mesh_tf.training.microbatch`: one step as ``k`` microbatches.
* :mod:`~mesh_tf.training.storage`: ZeRO / FSDP storage of weights,
  gradients and optimizer state.

``from mesh_tf import training; training.TrainStep(...)`` is the entry point.
"""

from mesh_tf.training.step import (TrainStep, make_train_step,
                                   train_step_for_model)

__all__ = ["TrainStep", "make_train_step", "train_step_for_model"]
