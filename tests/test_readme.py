"""The README's API tour runs as written (on the 8 logical CPU devices)."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_api_tour_runs():
  text = README.read_text(encoding="utf-8")
  blocks = re.findall(r"```python\n(.*?)```", text, re.S)
  tour = next(b for b in blocks if "mtf.Lowering(graph, {mesh: impl})" in b)
  namespace = {}
  exec(compile(tour, "README.md:api-tour", "exec"), namespace)  # pylint: disable=exec-used
  assert namespace["shape_impl"].trace.collectives


def test_quick_start_commands_are_the_ci_commands():
  text = README.read_text(encoding="utf-8")
  ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
  test_cmd = 'pip install -e ".[test]" && python -m pytest -q tests'
  assert test_cmd in text and test_cmd in ci
  assert "pip install -e . && mtf-layout solve" in text
