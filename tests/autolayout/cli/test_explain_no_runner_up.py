"""``explain`` never prints nan: a rule whose dim has no runner-up axis
says it has none."""

import types

from autolayout.cli import explain


def _row(axis, time_s):
  return {"dim": "batch", "axis": "data", "without_step_time_s": 2.0,
          "without_peak_memory_bytes": 10, "runner_up_axis": axis,
          "runner_up_step_time_s": time_s}


BASE = types.SimpleNamespace(step_time_s=1.0, peak_memory_bytes=10,
                             hbm_bytes=100)


def test_a_rule_without_runner_up_says_so():
  for axis, t in ((float("nan"), float("nan")), (None, None),
                  ("model", float("nan"))):
    line = explain._why(_row(axis, t), BASE)
    assert "nan" not in line
    assert line.endswith("it has no runner-up axis")


def test_a_rule_with_a_runner_up_prices_it():
  line = explain._why(_row("model", 1.5), BASE)
  assert "on model instead it would be 500 ms slower" in line
