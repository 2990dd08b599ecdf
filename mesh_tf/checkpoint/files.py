"""Atomic replacement of a checkpoint's files (``<prefix>.index`` and
``<prefix>.data-*``), so that a save killed at any instant leaves the
previous checkpoint restorable.

A checkpoint is two or more files, and no file system renames two files
at once.  So a save first writes the new checkpoint under a *staged* prefix
(``<prefix>.saving``), then swaps it in by renames in an order that keeps
one of the two checkpoints whole at every instant, with the *backup* prefix
(``<prefix>.previous``) holding the old one meanwhile:

1. ``P.index -> B.index.pending``      (P is now incomplete: no index);
2. ``P.data-* -> B.data-*``;
3. ``B.index.pending -> B.index``      (B is now whole);
4. ``S.data-* -> P.data-*``;
5. ``S.index -> P.index``              (the commit: P is whole, new);
6. delete ``B.*``.

:func:`recover` reads the files left by an interrupted save and undoes it:
``P.index`` present means P is whole (the index moves out first and in
last); else a pending backup index means step 2 was cut (every data file
of P is still old: move B's back); else a whole backup means steps 4-5
were cut (drop P's new data, move B back).  Pure Python, no TensorFlow.
"""

import glob
import os

__all__ = ["STAGES", "commit", "data_files", "fsync_files", "recover",
           "staged_prefix"]

# What :func:`commit` reports to its ``on_stage`` hook, in order.
STAGES = ("staged", "old-index-moved", "old-data-moved", "backup-whole",
          "new-data-moved", "committed")


def staged_prefix(prefix):
  """Where a save writes before :func:`commit` swaps it in."""
  return prefix + ".saving"


def _backup_prefix(prefix):
  return prefix + ".previous"


def data_files(prefix):
  """The ``<prefix>.data-*`` files, sorted."""
  return sorted(glob.glob(glob.escape(prefix) + ".data-*"))


def _move_data(src, dst):
  for f in data_files(src):
    os.replace(f, dst + f[len(src):])


def _remove(prefix):
  for f in data_files(prefix) + [prefix + ".index",
                                 prefix + ".index.pending"]:
    if os.path.exists(f):
      os.remove(f)


def _fsync_dir(path):
  try:
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
  except OSError:
    return  # not every platform opens directories
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def fsync_files(prefix):
  """Flushes a prefix's files to disk (so that a commit's renames never
  land before the data they name)."""
  for f in data_files(prefix) + [prefix + ".index"]:
    with open(f, "rb") as fh:
      os.fsync(fh.fileno())
  _fsync_dir(prefix)


def recover(prefix):
  """Undoes an interrupted :func:`commit` of ``prefix``, if any.

  Afterwards ``prefix`` is whole again (the old checkpoint, or the new one
  if the commit got through) or absent (a first save was interrupted), and
  no staged or backup files are left.

  Returns:
    True if files were moved back (an interrupted save was rolled back).
  """
  backup = _backup_prefix(prefix)
  rolled_back = False
  if not os.path.exists(prefix + ".index"):
    if os.path.exists(backup + ".index.pending"):
      _move_data(backup, prefix)
      os.replace(backup + ".index.pending", prefix + ".index")
      rolled_back = True
    elif os.path.exists(backup + ".index"):
      for f in data_files(prefix):
        os.remove(f)
      _move_data(backup, prefix)
      os.replace(backup + ".index", prefix + ".index")
      rolled_back = True
  _remove(backup)
  _remove(staged_prefix(prefix))
  if rolled_back:
    _fsync_dir(prefix)
  return rolled_back


def commit(prefix, on_stage=None):
  """Swaps the whole staged checkpoint (``staged_prefix(prefix)``) in as
  ``prefix``, keeping the old one restorable until the last rename.

  Args:
    prefix: the checkpoint prefix.
    on_stage: optional ``fn(stage)``, called after each stage of
      :data:`STAGES` (progress display; fault tests stop the process there).
  """
  hook = on_stage or (lambda stage: None)
  staged, backup = staged_prefix(prefix), _backup_prefix(prefix)
  fsync_files(staged)
  hook("staged")
  if os.path.exists(prefix + ".index"):
    os.replace(prefix + ".index", backup + ".index.pending")
    hook("old-index-moved")
    _move_data(prefix, backup)
    hook("old-data-moved")
    os.replace(backup + ".index.pending", backup + ".index")
    _fsync_dir(prefix)
    hook("backup-whole")
  else:
    for f in data_files(prefix):  # orphans of an interrupted first save
      os.remove(f)
  _move_data(staged, prefix)
  hook("new-data-moved")
  os.replace(staged + ".index", prefix + ".index")
  _fsync_dir(prefix)
  hook("committed")
  _remove(backup)
