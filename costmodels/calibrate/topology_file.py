"""Topology files: a (calibrated) :class:`~costmodels.Topology` as versioned
JSON on disk.

The schema, documented in ``docs/topology_files.md``, is the one of
:mod:`costmodels.topology_json`, which plan files embed too.
:func:`write_topology` writes atomically (a temporary file in the same folder, then ``os.replace``), so a
crash or an error never leaves a half-written file.  :func:`read_topology`
checks the schema name, the version and every field, and raises
:class:`TopologyFileError` naming the field and what to change.

Example:
  >>> import os, tempfile, costmodels
  >>> path = os.path.join(tempfile.mkdtemp(), "h100.json")
  >>> write_topology(path, costmodels.get_topology("dgx-h100"))
  >>> read_topology(path) == costmodels.get_topology("dgx-h100")
  True
"""

import json
import os
import tempfile

from costmodels.topology_json import (SCHEMA, VERSION, TopologyFileError,
                                      topology_from_dict, topology_to_dict)

__all__ = ["SCHEMA", "VERSION", "TopologyFileError", "read_topology",
           "read_topology_file", "topology_from_json", "topology_json",
           "write_topology"]


def topology_json(topology, calibration=None):
  """The JSON-ready dict of ``topology`` with its ``calibration`` metadata
  (:func:`costmodels.topology_json.topology_to_dict`)."""
  return topology_to_dict(topology, calibration or {})


def topology_from_json(obj, source="<json>"):
  """The Topology a JSON dict describes; see :func:`read_topology`."""
  return topology_from_dict(obj, source)


def write_topology(path, topology, calibration=None):
  """Writes ``topology`` (and ``calibration`` metadata) to ``path``
  atomically.

  Raises:
    TopologyFileError: if the path does not end in ``.json`` or its folder
      cannot be written.
  """
  path = os.fspath(path)
  if not path.lower().endswith(".json"):
    raise TopologyFileError(f"topology file {path!r} must end in .json, so "
                            "that -t/--topology recognises it as a file")
  text = json.dumps(topology_json(topology, calibration), indent=2,
                    allow_nan=False) + "\n"
  folder = os.path.dirname(os.path.abspath(path))
  try:
    fd, tmp = tempfile.mkstemp(prefix=".topology-", suffix=".tmp",
                               dir=folder)
  except OSError as e:
    raise TopologyFileError(f"cannot write topology file {path!r}: {e}; "
                            "choose a folder you can write") from e
  try:
    with os.fdopen(fd, "w") as f:
      f.write(text)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def read_topology_file(path):
  """``(Topology, calibration dict)`` from a topology file.

  Raises:
    TopologyFileError: if the file is missing, not JSON, or off-schema.
  """
  path = os.fspath(path)
  try:
    with open(path) as f:
      obj = json.load(f)
  except FileNotFoundError:
    raise TopologyFileError(
        f"topology file {path!r} does not exist; write one with "
        "`mtf-layout calibrate -o FILE.json` or give a preset name") from None
  except (OSError, ValueError) as e:
    raise TopologyFileError(f"cannot read topology file {path!r}: {e}") \
        from None
  topology = topology_from_json(obj, source=path)
  return topology, (obj.get("calibration") if isinstance(obj, dict)
                    else None) or {}


def read_topology(path):
  """The :class:`~costmodels.Topology` stored in ``path``.

  Raises:
    TopologyFileError: if the file is missing, not JSON, or off-schema.
  """
  return read_topology_file(path)[0]


#: Environment variable naming extra folders (``os.pathsep``-separated) in
#: which ``mtf-layout topologies`` looks for topology files, besides the
#: working directory.  Read at the CLI edge only.
PATH_ENV = "MTF_TOPOLOGY_PATH"

# Larger JSON files are not topology files (a full calibration with its
# samples is about 100 KiB); skipping them keeps discovery quick.
_MAX_DISCOVERED_BYTES = 16 * 2**20


def discover_topology_files(folders):
  """Paths of the topology files among the ``*.json`` files directly in
  ``folders`` (in folder order, then by name), skipping JSON that is not
  a mesh-tf topology (a folder holds other JSON too) and folders that do
  not exist.

  Example:
    >>> import os, tempfile, costmodels
    >>> d = tempfile.mkdtemp()
    >>> write_topology(os.path.join(d, "h100.json"),
    ...                costmodels.get_topology("dgx-h100"))
    >>> with open(os.path.join(d, "other.json"), "w") as f:
    ...   _ = f.write("{}")
    >>> [os.path.basename(p) for p in discover_topology_files([d])]
    ['h100.json']
  """
  out, seen = [], set()
  for folder in folders:
    try:
      names = sorted(os.listdir(folder))
    except OSError:
      continue
    for name in names:
      path = os.path.join(folder, name)
      real = os.path.realpath(path)
      if (not name.lower().endswith(".json") or real in seen
          or not os.path.isfile(path)
          or os.path.getsize(path) > _MAX_DISCOVERED_BYTES):
        continue
      try:
        read_topology(path)
      except TopologyFileError:
        continue
      seen.add(real)
      out.append(path)
  return out
