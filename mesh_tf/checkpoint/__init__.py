"""Checkpoints of laid-out variables, restorable under any layout and mesh.

* :mod:`~mesh_tf.checkpoint.store`: :func:`save`, :func:`restore`,
  :func:`load_values` and their errors.
* :mod:`~mesh_tf.checkpoint.files`: the atomic replacement of a checkpoint's
  files, and recovery from a save that stopped half way.
"""

from mesh_tf.checkpoint.store import (CheckpointError,
                                      CheckpointMismatchError, load_values,
                                      restore, save)

__all__ = ["CheckpointError", "CheckpointMismatchError", "load_values",
           "restore", "save"]
