"""The one rule about import order: OR-Tools' CP-SAT before TensorFlow.

Importing TensorFlow before ``ortools.sat.python.cp_model`` in one process
makes CP-SAT crash (in ``solve``, or when its objects are collected): the
two libraries' protobuf runtimes clash.  mesh-tf keeps the safe order for
its users: ``import mesh_tf`` imports CP-SAT first (when installed), and
mesh-tf itself imports TensorFlow only through :func:`import_tensorflow`.
The layout search checks the order with :func:`tensorflow_loaded_first`.

Pure Python; imports neither library at module load.  Both imports are
plain ``import`` statements inside the functions, so that import-linter
sees them: ``.importlinter`` names this module's OR-Tools import as the
one that mesh_tf makes, and the TensorFlow contract sees where TF comes
from (:mod:`mesh_tf.lowering.lazy_tf` calls :func:`import_tensorflow`).
"""

import sys

__all__ = ["CP_SAT_MODULE", "import_cp_sat_first", "import_tensorflow",
           "tensorflow_loaded_first"]

CP_SAT_MODULE = "ortools.sat.python.cp_model"


def import_cp_sat_first():
  """Imports CP-SAT now, while TensorFlow is not loaded, so that every
  later order is safe.

  Returns:
    True if CP-SAT is loaded before TensorFlow now; False if OR-Tools is
    not installed (the layout search is then unavailable anyway) or
    TensorFlow was loaded first (then importing CP-SAT cannot help).
  """
  if "tensorflow" in sys.modules:
    return CP_SAT_MODULE in sys.modules and not tensorflow_loaded_first()
  try:
    # A plain import statement (not importlib), so that the import contracts
    # see it: .importlinter lists it as the one OR-Tools import of mesh_tf.
    from ortools.sat.python import cp_model  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    return False
  return True


def import_tensorflow():
  """Imports and returns TensorFlow, CP-SAT first when available."""
  import_cp_sat_first()
  import tensorflow  # pylint: disable=g-import-not-at-top
  return tensorflow


def tensorflow_loaded_first():
  """True if this process imported TensorFlow before CP-SAT.

  ``sys.modules`` keeps insertion (import) order, so this is known after
  the fact.
  """
  names = list(sys.modules)
  try:
    return names.index("tensorflow") < names.index(CP_SAT_MODULE)
  except ValueError:
    return False
