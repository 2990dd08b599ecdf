"""Zoo integrity: every preset of every family (and the decoding step of the
zoo LMs) solves, reports, explains and runs ``pareto`` through the CLI on
its natural topology, with a clean exit and a valid JSON document.

The CLI runs in-process through ``main(argv)`` with short time limits, so
the whole matrix takes seconds.  A preset added to the zoo is picked up by
``models.list_models()`` and checked on the default topology unless
``NATURAL`` names another.
"""

import json

import pytest

from autolayout.cli import main
from mesh_tf import models

# The topology each preset is sized for (the CLI's default is
# tpu-v5e-16x16).  gpt3_175b needs more than 256 16-GB chips even with its
# best layout (68 GiB a chip there), so it runs on a 1024-chip v5p pod.
NATURAL = {
    "gpt3_175b": "tpu-v5p-8x8x16",
    # The forward question keeps palm_540b's float32 weights unsharded over
    # data (no ZeRO storage), about 1.7 TB: 24-way model parallel on
    # 95-GB v5p chips fits, PaLM's own v4 pods only train it with sharded
    # storage (benchmarks/anchors.py).
    "palm_540b": "tpu-v5p-16x16x24",
    "transformer_tiny": "tpu-v5e-2x4",
    "mlp_tiny": "tpu-v5e-2x4",
    "moe_tiny": "tpu-v5e-2x4",
    "conv3d_tiny": "tpu-v5e-2x4",
}
DEFAULT_TOPOLOGY = "tpu-v5e-16x16"
FAST = ["--time-limit", "10", "--workers", "2", "-f", "json"]

CASES = [(p, NATURAL.get(p, DEFAULT_TOPOLOGY)) for p in models.list_models()]
CASES += [("decode:transformer_tiny", "tpu-v5e-2x4"),
          ("decode:gpt2_small", DEFAULT_TOPOLOGY)]


def _run(capsys, *argv):
  code = main(list(argv))
  out, err = capsys.readouterr()
  assert code == 0, f"mtf-layout {' '.join(argv)} exited {code}: {err}"
  doc = json.loads(out)
  assert doc["schema"] == "mtf-layout/1"
  return doc


def test_every_family_has_a_preset_here():
  from autolayout.cli.models import FAMILIES
  assert set(FAMILIES.values()) <= {p for p, _ in CASES}


@pytest.mark.parametrize("preset,topology", CASES, ids=[c[0] for c in CASES])
def test_preset_solves_reports_explains_and_runs_pareto(capsys, preset,
                                                        topology):
  # One mesh for all four commands (solve alone would search mesh shapes;
  # tests/autolayout/test_default_answers.py checks that default).
  from autolayout.cli import inputs
  mesh = inputs.default_mesh(inputs.get_topology(topology))
  common = ["-m", preset, "-t", topology, "--mesh", mesh, "--forward"] + FAST
  if preset.startswith("decode:"):
    common += ["--objective", "latency"]
  solved = _run(capsys, "solve", *common)["result"]
  assert solved["solver"]["status"] in ("optimal", "feasible")
  assert solved["memory"]["fits"]
  assert solved["step_time_s"] > 0

  report = _run(capsys, "report", *common, "--layout", solved["rules"])
  assert report["result"]["step_time_s"] == solved["step_time_s"]
  assert report["ops"], "a report lists the ops"

  explained = _run(capsys, "explain", *common)
  assert {(r["dim"], r["axis"]) for r in explained["rules"]} == {
      (r["dim"], r["axis"]) for r in explained["result"]["rules_list"]}

  front = _run(capsys, "pareto", *common, "--max-points", "3")["points"]
  assert 1 <= len(front) <= 3
  times = [p["step_time_s"] for p in front]
  assert times == sorted(times), "the front goes from fastest to leanest"
