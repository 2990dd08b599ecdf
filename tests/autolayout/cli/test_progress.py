"""The closing ``done in`` line accounts for the wall time: its phases
(and the decision programs inside the search) add up to it."""

import re

from autolayout import cli

TINY = ["--model", "transformer_tiny", "--topology", "dgx-h100", "--mesh",
        "data:2;model:4"]


def _summary(stderr):
  line = " ".join(stderr.split())
  m = re.search(r"done in ([\d.]+) s = (.*)$", line)
  assert m, stderr
  wall, rest = float(m.group(1)), m.group(2)
  top = re.sub(r"\([^)]*\)", "", rest)   # the phases, without their steps
  parts = re.findall(r"([a-z][a-z ]*?) ([\d.]+) s", top)
  return wall, {name.strip(): float(s) for name, s in parts}, rest


def test_solve_phases_add_up_to_the_wall_time(capsys):
  assert cli.main(["solve", *TINY, "--memory-budget", "120KiB"]) == 0
  wall, phases, _ = _summary(capsys.readouterr().err)
  assert list(phases) == ["model and topology", "search", "output", "other"]
  # Each figure is rounded to 0.1 s.
  assert abs(sum(phases.values()) - wall) <= 0.05 * (len(phases) + 1)


def test_a_decision_search_shows_each_program(capsys):
  assert cli.main(["solve", *TINY, "--train", "--zero-stage", "3",
                   "--recompute", "0", "--memory-budget", "120KiB"]) == 0
  wall, phases, text = _summary(capsys.readouterr().err)
  steps = re.search(r"search [\d.]+ s \(([^)]*)\)", text).group(1)
  programs = re.findall(r"k=(\d+): (?:best [\d.]+ [mun]?s|every candidate "
                        r"over budget) ([\d.]+) s", steps)
  assert programs and programs[0][0] == "1", steps
  # The programs are the search's steps: together within its time.
  assert sum(float(s) for _, s in programs) <= phases["search"] + 0.05 * (
      len(programs) + 1)
  assert abs(sum(phases.values()) - wall) <= 0.05 * (len(phases) + 1)
