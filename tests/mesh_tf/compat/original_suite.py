"""Runs the original Mesh TensorFlow's own test files, straight from the
installed ``mesh-tensorflow==0.1.21`` wheel, and prints each test's outcome
as JSON: ``{"file": {"test id": "pass" | "fail" | "error" | "skip"}}``.

``python original_suite.py LIBRARY MODE FILE...``:

* ``LIBRARY`` is ``original`` (the wheel itself, with
  ``benchmarks/mtf_port.py``'s import shims) or ``mesh_tf`` (the name
  ``mesh_tensorflow`` and its submodules resolve to mesh-tf's modules,
  through :class:`AliasFinder`).
* ``MODE`` is the mode the files' own ``__main__`` sets up: ``v1`` is
  ``tf.compat.v1.disable_v2_behavior()``; ``v1-eager`` is that, then
  ``enable_eager_execution()``; ``v2`` is TF's default.  The mode is
  process-wide, which is why tests/mesh_tf/compat/test_original_suite.py
  runs this in a subprocess.
* ``FILE`` is a test file's path inside the wheel (``ops_test.py``,
  ``auto_mtf/api_test.py``).

Two modules the test files import are not installed here: ``mock`` is the
standard library's ``unittest.mock``; ``tensorflow_probability`` is a module
with no attributes, so the two tests that call it fail on both libraries.
"""

import importlib
import importlib.abc
import importlib.util
import json
import os
import sys
import types
import unittest
import unittest.mock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
ALIAS = "mesh_tensorflow"


class _ExistingModule(importlib.abc.Loader):
  """Loads an already imported module under a second name."""

  def __init__(self, module):
    self.module = module
    self.spec = module.__spec__

  def create_module(self, spec):
    return self.module

  def exec_module(self, module):
    module.__spec__ = self.spec   # the import system set the alias's spec


class AliasFinder(importlib.abc.MetaPathFinder):
  """``mesh_tensorflow.a.b`` is mesh-tf's module that ``mesh_tf.a.b`` names:
  each part is the parent's attribute when that is a module (``mtf.
  placement_mesh_impl`` lives in ``mesh_tf.compat``), else its submodule."""

  def find_spec(self, fullname, path=None, target=None):
    del path, target
    parts = fullname.split(".")
    if parts[0] != ALIAS:
      return None
    module = importlib.import_module("mesh_tf")
    for part in parts[1:]:
      attr = getattr(module, part, None)
      if isinstance(attr, types.ModuleType):
        module = attr
      else:
        module = importlib.import_module(f"{module.__name__}.{part}")
    return importlib.util.spec_from_loader(fullname, _ExistingModule(module))


def _install(library):
  # OR-Tools before TensorFlow, or CP-SAT crashes (mesh_tf.startup.import_order).
  importlib.import_module("ortools.sat.python.cp_model")
  sys.modules.setdefault("mock", unittest.mock)
  sys.modules.setdefault("tensorflow_probability",
                         types.ModuleType("tensorflow_probability"))
  if library == "original":
    sys.path.insert(0, ROOT)
    spec = importlib.util.spec_from_file_location(
        "mtf_port", os.path.join(ROOT, "benchmarks", "mtf_port.py"))
    port = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(port)
    port._shim_original()  # pylint: disable=protected-access
  else:
    sys.path = [p for p in sys.path if not p.endswith("site-packages")] + [
        p for p in sys.path if p.endswith("site-packages")]
    sys.meta_path.insert(0, AliasFinder())


def _set_mode(mode):
  import tensorflow.compat.v1 as tf  # pylint: disable=import-outside-toplevel
  if mode in ("v1", "v1-eager"):
    tf.disable_v2_behavior()
  if mode == "v1-eager":
    tf.enable_eager_execution()


def _wheel_dir():
  spec = importlib.util.find_spec("mesh_tensorflow")
  if spec is not None and spec.origin and "site-packages" in spec.origin:
    return os.path.dirname(spec.origin)
  for p in sys.path:
    d = os.path.join(p, "mesh_tensorflow")
    if os.path.isfile(os.path.join(d, "__init__.py")):
      return d
  raise FileNotFoundError("mesh_tensorflow 0.1.21 is not installed")


class _Result(unittest.TestResult):

  def __init__(self):
    super().__init__()
    self.outcomes = {}

  def _id(self, test):
    return test.id().split(".", 1)[1]

  def addSuccess(self, test):
    self.outcomes.setdefault(self._id(test), "pass")

  def addFailure(self, test, err):
    self.outcomes[self._id(test)] = "fail"
    self.details = getattr(self, "details", {})
    self.details[self._id(test)] = self._exc_info_to_string(err, test)[-1500:]

  def addError(self, test, err):
    self.outcomes[self._id(test)] = "error"
    self.details = getattr(self, "details", {})
    self.details[self._id(test)] = self._exc_info_to_string(err, test)[-1500:]

  def addSkip(self, test, reason):
    self.outcomes[self._id(test)] = "skip"

  def addSubTest(self, test, subtest, err):
    if err is not None:   # a failed sub-test fails its test
      self.addFailure(test, err)

  def addExpectedFailure(self, test, err):
    self.outcomes[self._id(test)] = "expected failure"

  def addUnexpectedSuccess(self, test):
    self.outcomes[self._id(test)] = "unexpected success"


def run_file(wheel, rel):
  name = "original_" + rel[:-3].replace("/", "_")
  spec = importlib.util.spec_from_file_location(name, os.path.join(wheel, rel))
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module
  try:
    spec.loader.exec_module(module)
  except Exception as e:  # pylint: disable=broad-except
    return {"<import>": "error"}, {"<import>": f"{type(e).__name__}: {e}"}
  suite = unittest.defaultTestLoader.loadTestsFromModule(module)
  result = _Result()
  suite.run(result)
  return result.outcomes, getattr(result, "details", {})


def main(argv):
  library, mode, files = argv[0], argv[1], argv[2:]
  wheel = _wheel_dir()
  _install(library)
  _set_mode(mode)
  out, details = {}, {}
  for rel in files:
    out[rel], details[rel] = run_file(wheel, rel)
  print(json.dumps({"outcomes": out, "details": details}))


if __name__ == "__main__":
  main(sys.argv[1:])
