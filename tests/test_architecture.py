"""Gates that keep the architecture one-way (issue 12).

* import-linter contracts (``.importlinter``): ``mesh_tf`` <- ``costmodels``
  <- ``autolayout``; ``mesh_tf.core`` at the bottom; TensorFlow only where
  devices are touched; OR-Tools only in ``autolayout``;
* no import cycles between the project's modules, lazy (function-level)
  imports included;
* ruff with the small rule set of ``ruff.toml``;
* no module of the three packages over 600 lines.
"""

import ast
import os
import shutil
import subprocess
import sys

import networkx as nx
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("mesh_tf", "costmodels", "autolayout")
MAX_LINES = 600


def _tool(name):
  """The venv's console script for ``name``, else one on PATH."""
  here = os.path.join(os.path.dirname(sys.executable), name)
  return here if os.path.exists(here) else shutil.which(name)


def _modules():
  """``{dotted module name: path}`` of every module of the packages and
  of ``benchmarks`` (the line and cycle gates see it too, issue 38)."""
  mods = {}
  for pkg in PACKAGES + ("benchmarks",):
    for folder, _, files in os.walk(os.path.join(ROOT, pkg)):
      for f in files:
        if f.endswith(".py"):
          path = os.path.join(folder, f)
          name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
          mods[name.removesuffix(".__init__")] = path
  return mods


def _imported(module, path, node, mods):
  """Project modules that one import statement names (most specific)."""
  if isinstance(node, ast.Import):
    names = [a.name for a in node.names]
  else:
    base = node.module or ""
    if node.level:
      parts = module.split(".")
      if not path.endswith("__init__.py"):
        parts = parts[:-1]
      parts = parts[:len(parts) - node.level + 1]
      base = ".".join(parts + ([base] if base else []))
    names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
             for a in node.names]
  for name in names:
    while name and name not in mods:
      name = name.rpartition(".")[0]
    if name and name != module:
      yield name


def import_graph():
  """Directed graph of imports between the project's modules.

  Every ``import`` statement counts, wherever it stands (a function-level
  import is still a dependency).  An edge goes to the most specific module
  named, so ``from mesh_tf.core import dims`` depends on
  ``mesh_tf.core.dims``, not on ``mesh_tf/__init__``.
  """
  mods = _modules()
  graph = nx.DiGraph()
  graph.add_nodes_from(mods)
  for module, path in mods.items():
    with open(path, encoding="utf-8") as f:
      tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
      if isinstance(node, (ast.Import, ast.ImportFrom)):
        graph.add_edges_from((module, dep) for dep in
                             _imported(module, path, node, mods))
  return graph


def test_import_graph_sees_lazy_imports():
  graph = import_graph()
  # mtf.auto_layout imports the optimizer inside the call.
  assert any(dep.startswith("autolayout") for dep in graph["mesh_tf.auto_mtf.door"])


def test_no_import_cycles():
  cycles = sorted(nx.simple_cycles(import_graph()), key=len)
  assert not cycles, "import cycles:\n" + "\n".join(
      " -> ".join(c + [c[0]]) for c in cycles[:20])


def test_no_module_over_600_lines():
  long = {}
  for name, path in _modules().items():
    with open(path, encoding="utf-8") as f:
      n = sum(1 for _ in f)
    if n > MAX_LINES:
      long[name] = n
  assert not long, f"modules over {MAX_LINES} lines: {long}"


@pytest.mark.parametrize("tool,args", [
    ("lint-imports", ["--no-cache"]),
    ("ruff", ["check", "--no-cache", "-q", "."]),
])
def test_gate(tool, args):
  exe = _tool(tool)
  assert exe, f"{tool} is not installed: pip install -e '.[test]'"
  p = subprocess.run([exe, *args], cwd=ROOT, capture_output=True, text=True,
                     timeout=300, check=False)
  assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
