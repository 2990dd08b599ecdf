"""The contract every ``mtf-layout`` run keeps (docs/cli.md, "Errors and
exit codes"), as one checker that the hostile-input and fuzz tests share.

``run(argv)`` runs ``main(argv)`` in-process and captures its output;
``problems(result)`` lists every way the run broke the contract.
"""

import contextlib
import io
import json
import re
from typing import NamedTuple

from autolayout.cli import main

INTERNAL_NAMES = re.compile(r"\b(time_limit_s|num_workers|memory_budget|"
                            r"max_points|max_axes|num_devices|mesh_shape|"
                            r"layout_rules)\b")


class Run(NamedTuple):
  argv: tuple
  code: object   # the exit code, or a description of what escaped main()
  out: str
  err: str


def run(argv):
  """``main(argv)`` with stdout and stderr captured."""
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      code = main(list(argv))
    except BaseException as e:  # pylint: disable=broad-except
      code = f"{type(e).__name__} escaped main(): {e}"
  return Run(tuple(argv), code, out.getvalue(), err.getvalue())


def wants_json(argv):
  argv = list(argv)
  return any(a in ("-fjson", "--format=json") or (
      a in ("-f", "--format") and i + 1 < len(argv) and argv[i + 1] == "json")
             for i, a in enumerate(argv))


def problems(r):
  """Every way ``r`` breaks the contract (empty: it keeps it)."""
  found = []
  if not isinstance(r.code, int):
    return [str(r.code)]
  if "Traceback" in r.err:
    found.append("a traceback on stderr")
  if r.code == 1:
    found.append("exit 1 (an internal error): " + r.err.strip()[:300])
  elif r.code not in (0, 2, 3, 4):
    found.append(f"exit {r.code}")
  lines = [l for l in r.err.splitlines() if l.strip()]
  errors = [l for l in lines if l.startswith("mtf-layout: error: ")]
  hints = [l for l in lines if l.startswith("hint: ")]
  if r.code != 0:
    if len(errors) != 1 or len(hints) != 1:
      found.append(f"{len(errors)} error line(s) and {len(hints)} hint "
                   f"line(s): {r.err[-500:]!r}")
    for line in errors + hints:
      if len(line) > 1300:
        found.append(f"a {len(line)}-character line")
      if re.search(r"\S{260,}", line):
        found.append("an echoed input longer than ~200 characters")
      if INTERNAL_NAMES.search(line):
        found.append(f"an internal parameter name: {line[:200]!r}")
    if wants_json(r.argv):
      try:
        doc = json.loads(r.out)
        if set(doc) < {"error", "hint", "exit_code"} or (
            doc["exit_code"] != r.code):
          found.append(f"JSON error object incomplete: {doc}")
      except ValueError:
        found.append(f"stdout is not a JSON error object: {r.out[:200]!r}")
  else:
    if errors:
      found.append("exit 0 with an error line")
    if wants_json(r.argv):
      try:
        json.loads(r.out)
      except ValueError:
        found.append(f"stdout is not JSON: {r.out[:200]!r}")
  return found
