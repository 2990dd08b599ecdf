"""``mtf-layout calibrate`` and topology files on the command line: the
arguments and errors (a real calibration runs in
tests/costmodels/test_calibrate.py and the notebook)."""

import json

from costmodels.calibrate import topology_file
from tests.autolayout.cli.test_cli import run_cli
from tests.costmodels.test_calibrate import _calibrated


def test_topology_files_work_with_every_command(tmp_path):
  path = str(tmp_path / "mycpu.json")
  topology_file.write_topology(path, _calibrated())
  p = run_cli("topologies", path, "--format", "json")
  assert p.returncode == 0, p.stderr
  names = [t["topology"] for t in json.loads(p.stdout)["topologies"]]
  assert names[-1] == path and "dgx-h100" in names
  p = run_cli("solve", "-m", "mlp_tiny", "--train", "-t", path, "--mesh",
              "a:2;b:4", "--format", "json")
  assert p.returncode == 0, p.stderr
  assert json.loads(p.stdout)["model"]["topology"] == "mycpu"


def test_calibrate_and_topology_file_errors(tmp_path):
  p = run_cli("calibrate", "-o", str(tmp_path / "x.json"))
  assert p.returncode == 2 and "exactly one" in p.stderr
  p = run_cli("calibrate", "--cpu-devices", "8", "-o",
              str(tmp_path / "x.txt"))
  assert p.returncode == 2 and "must end in .json" in p.stderr
  bad = tmp_path / "bad.json"
  bad.write_text(json.dumps({"schema": "nope"}))
  p = run_cli("report", "-m", "mlp_tiny", "-t", str(bad), "-l", "")
  assert p.returncode == 2 and "schema 'nope'" in p.stderr
  assert "docs/topology_files.md" in p.stderr
  assert not list(tmp_path.glob("x.*"))
