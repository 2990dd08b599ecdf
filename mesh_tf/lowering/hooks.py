"""Session hooks of Mesh TensorFlow's graph-mode training loops.

``MtfRestoreHook`` copies the master variables into the slices once the
session exists (after ``tf.train.Saver`` restored the masters, or after
they were initialised); ``MtfCheckpointSaverListener`` copies the slices
back into the masters before each save.  Both make the masters when
constructed (see :mod:`mesh_tf.lowering.masters`), so build them before the
``tf.train.Saver``, as Mesh TensorFlow programs do.

This module imports TensorFlow (the hooks subclass its classes); ``import
mesh_tf`` loads it only when ``mtf.MtfRestoreHook`` is first used.
"""

import tensorflow as tf

from mesh_tf.lowering.masters import make_masters

__all__ = ["MtfCheckpointSaverListener", "MtfRestoreHook"]


class MtfRestoreHook(tf.compat.v1.train.SessionRunHook):
  """Runs ``lowering.copy_masters_to_slices()`` after session creation.

  Args:
    lowering: the :class:`~mesh_tf.Lowering` of the training graph.

  Example:
    >>> restore_hook = mtf.MtfRestoreHook(lowering)          # doctest: +SKIP
    >>> with tf.train.MonitoredTrainingSession(hooks=[restore_hook]) as s:
    ...   ...
  """

  def __init__(self, lowering):
    self._lowering = lowering
    self._op = make_masters(lowering).copy_masters_to_slices()

  def after_create_session(self, session, coord):
    session.run(self._op)


class MtfCheckpointSaverListener(tf.compat.v1.train.CheckpointSaverListener):
  """Runs ``lowering.copy_slices_to_masters()`` before each checkpoint save.

  Pass it to ``tf.train.CheckpointSaverHook(..., listeners=[...])``.
  """

  def __init__(self, lowering):
    self._lowering = lowering
    self._op = make_masters(lowering).copy_slices_to_masters()

  def before_save(self, session, global_step_value):
    session.run(self._op)
