"""No import that the import contracts cannot see (issue 38): the project's
packages load TensorFlow and OR-Tools only with ``import`` statements, never
through ``importlib.import_module``/``__import__`` with a literal name, so
``.importlinter``'s TensorFlow and OR-Tools contracts cover every load
(mesh_tf.startup.import_order's included)."""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("mesh_tf", "costmodels", "autolayout")
WATCHED = ("tensorflow", "ortools", "jax", "torch")


def _hidden_loads(path):
  tree = ast.parse(open(path, encoding="utf-8").read(), path)
  for node in ast.walk(tree):
    if not isinstance(node, ast.Call) or not node.args:
      continue
    f = node.func
    name = (f.attr if isinstance(f, ast.Attribute)
            else f.id if isinstance(f, ast.Name) else "")
    if name not in ("import_module", "__import__"):
      continue
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and (
        arg.value.split(".")[0] in WATCHED):
      yield node.lineno, arg.value


def test_no_library_is_loaded_behind_the_contracts():
  found = []
  for pkg in PACKAGES:
    for folder, _, files in os.walk(os.path.join(ROOT, pkg)):
      for f in files:
        if f.endswith(".py"):
          path = os.path.join(folder, f)
          found += [f"{os.path.relpath(path, ROOT)}:{line} loads {name}"
                    for line, name in _hidden_loads(path)]
  assert not found, found


def test_the_check_sees_an_importlib_load(tmp_path):
  path = tmp_path / "m.py"
  path.write_text("import importlib\nimportlib.import_module('tensorflow')\n")
  assert list(_hidden_loads(str(path))) == [(2, "tensorflow")]
