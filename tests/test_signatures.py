"""Names, not positions, in the public API (issue 38): no public function
or method of ``autolayout`` or ``costmodels`` takes more than
:data:`MAX_POSITIONAL` parameters that may be passed by position; every
further one is a keyword-only option.  (``mesh_tf`` keeps the original Mesh
TF's signatures.)  Read from the source with ``ast``, so that no package
is imported."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("autolayout", "costmodels")
MAX_POSITIONAL = 8


def positional_params(function, in_class):
  """The names of ``function``'s parameters that can be passed by position
  (``self``/``cls`` of a method not counted)."""
  names = [a.arg for a in function.args.posonlyargs + function.args.args]
  if in_class and names and names[0] in ("self", "cls"):
    names = names[1:]
  return names


def public_functions(tree):
  """``(qualified name, node, in a class)`` of the public module-level
  functions and the public methods (``__init__`` included) of public
  classes."""
  def visit(body, prefix, in_class):
    for node in body:
      if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
        yield from visit(node.body, f"{prefix}{node.name}.", True)
      elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
          not node.name.startswith("_") or node.name == "__init__"):
        yield f"{prefix}{node.name}", node, in_class
  yield from visit(tree.body, "", False)


def wide_signatures(root=ROOT):
  out = []
  for package in PACKAGES:
    for path in sorted((root / package).rglob("*.py")):
      tree = ast.parse(path.read_text(encoding="utf-8"))
      for name, node, in_class in public_functions(tree):
        names = positional_params(node, in_class)
        if len(names) > MAX_POSITIONAL:
          out.append(f"{path.relative_to(root)}:{node.lineno} {name} takes "
                     f"{len(names)} positional parameters")
  return out


def test_no_public_function_takes_more_than_8_positional_parameters():
  wide = wide_signatures()
  assert not wide, ("make the options after the eighth keyword-only (add "
                    "`*`):\n" + "\n".join(wide))


def test_the_gate_sees_a_wide_function(tmp_path):
  pkg = tmp_path / "autolayout"
  pkg.mkdir()
  (tmp_path / "costmodels").mkdir()
  (pkg / "wide.py").write_text(
      "def wide(a, b, c, d, e, f, g, h, i):\n  pass\n\n"
      "def narrow(a, b, c, d, e, f, g, h, *, i=0):\n  pass\n\n"
      "class Search:\n  def solve(self, a, b, c, d, e, f, g, h, i):\n"
      "    pass\n\n  def _private(self, a, b, c, d, e, f, g, h, i):\n"
      "    pass\n")
  assert wide_signatures(tmp_path) == [
      "autolayout/wide.py:1 wide takes 9 positional parameters",
      "autolayout/wide.py:8 Search.solve takes 9 positional parameters"]


@pytest.mark.parametrize("package", PACKAGES)
def test_the_gate_reads_every_module(package):
  assert len(list((ROOT / package).rglob("*.py"))) > 10
