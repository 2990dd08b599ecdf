"""Which plan spaces ``mtf-layout solve`` compares at scale: the pipelined
space on TPU slices too, and for a bare ``solve`` (the training step by
default) where it searches the training decisions; a forward pass says
that the pipelined space was not searched."""

import json

from autolayout import cli

# 12.9B parameters on three 8-GPU nodes (as tests/autolayout/cli/
# test_cli_pipeline.py's LARGE, without --train).
BIG = ["-m", "gpt3_175b", "--set",
       "layers=16,d_model=8192,heads=64,d_kv=128,d_ff=32768,batch=18,"
       "vocab=8192", "-t", "a100x8-nodes3", "--time-limit", "8"]


def _solve(capsys, *argv):
  assert cli.main(["solve", *argv, "--format", "json"]) == 0
  return json.loads(capsys.readouterr().out)


def _steps(compared):
  """``({space: predicted step s}, chosen space)`` of the comparison."""
  steps = {}
  for line in compared[1:-1]:
    if "step " in line:
      steps[line.strip().split(" ")[0]] = float(
          line.split("step ")[1].split(" s")[0])
  return steps, compared[-1].strip().removeprefix("chosen: ")


def test_train_on_a_large_tpu_slice_compares_the_pipelined_space(capsys):
  # The default limit: the pipelined search gets up to 11 s of the 16.
  out = _solve(capsys, "-m", "gpt3_175b", "-t", "tpu-v4-8x8x8", "--train")
  compared = out["spaces_compared"]
  assert compared[0].startswith("compared the pipelined and the "
                                "unpipelined plan spaces")
  piped = next(x for x in compared if x.strip().startswith("pipelined"))
  assert piped.strip().startswith("pipelined (") and "step " in piped
  assert any(x.strip().startswith("unpipelined") for x in compared)
  steps, chosen = _steps(compared)
  assert steps[chosen] == min(steps.values())


def test_bare_solve_that_searches_decisions_compares_pipelined(capsys):
  # At 20 GiB per device the step as built fits no layout, so the bare
  # solve searches the training decisions: its plan is compared with the
  # pipelined one.
  out = _solve(capsys, *BIG, "--memory-budget", "20GiB")
  compared = out["spaces_compared"]
  assert compared[0].startswith("compared the pipelined and the "
                                "unpipelined plan spaces")
  assert any(x.strip().startswith("pipelined (optimal") for x in compared)
  steps, chosen = _steps(compared)
  assert steps[chosen] == min(steps.values())


def test_bare_solve_whose_step_as_built_fits_says_why_not_compared(capsys):
  # The default limit (16 s for both searches): the step as built is
  # solved in it, and fits.
  out = _solve(capsys, *BIG[:-2])
  compared = out["spaces_compared"]
  assert out["question"] == "train"
  assert any("pipelined: not compared (the step as built fits" in x
             for x in compared)
  assert compared[-1].strip() == "chosen: unpipelined"


def test_forward_pass_says_the_pipelined_space_was_not_searched(capsys):
  out = _solve(capsys, *BIG[:-2], "--forward", "--time-limit", "4")
  assert out["question"] == "forward"
  (line,) = out["spaces_compared"]
  assert line.startswith("pipelined plans: not searched")
  assert "training steps" in line and "--train" in line
