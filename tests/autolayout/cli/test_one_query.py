"""One query, built once at the edge (issue 38): following ``--topology``,
``--mesh`` and ``--zero-stage`` from the command line down through one
``solve``, the topology's name is resolved once, the mesh string parsed
once and the ZeRO stage's text parsed once, and the values they became
reach the plan."""

import json

import pytest

from autolayout import cli
from autolayout.training import zero
from costmodels.topology import presets
from mesh_tf.core import dims as dims_lib


@pytest.fixture
def counts(monkeypatch):
  """Counts the name resolutions, mesh parses and ZeRO-stage parses made
  while the test runs (each wraps the one function that does it)."""
  seen = {"topology": [], "mesh": [], "zero_stage": []}
  resolve, parse_sizes, parse_stage = (presets.topology_from_name,
                                       dims_lib.parse_name_sizes, zero.parse)

  def counted_resolve(name):
    seen["topology"].append(name)
    return resolve(name)

  def counted_sizes(text, what, *args, **kwargs):
    if what == "mesh shape":
      seen["mesh"].append(text)
    return parse_sizes(text, what, *args, **kwargs)

  def counted_stage(text, *args, **kwargs):
    seen["zero_stage"].append(text)
    return parse_stage(text, *args, **kwargs)

  monkeypatch.setattr(presets, "topology_from_name", counted_resolve)
  monkeypatch.setattr(dims_lib, "parse_name_sizes", counted_sizes)
  monkeypatch.setattr(zero, "parse", counted_stage)
  return seen


def test_cli_solve_resolves_and_parses_once(counts, capsys):
  stage = "ffn=3,attention=3,embedding=1,norm=0"
  code = cli.main(["solve", "--model", "transformer_tiny", "--topology",
                   "tpu-v5e-2x4", "--mesh", "data:2;model:4", "--train",
                   "--zero-stage", stage, "--recompute", "0",
                   "--microbatches", "1", "--time-limit", "60", "-f",
                   "json"])
  out = capsys.readouterr().out
  assert code == 0, out
  assert counts == {"topology": ["tpu-v5e-2x4"], "mesh": ["data:2;model:4"],
                    "zero_stage": [stage]}
  # What the text became is what the plan holds.
  decisions = json.loads(out)["result"]["training"]["decisions"]
  assert decisions["zero_stage"] == {"attention": 3, "embedding": 1,
                                     "ffn": 3, "norm": 0}


def test_default_solve_resolves_once(counts, capsys):
  """The default question (the API's own path, autolayout.default_search)
  on a given mesh: one resolution, one mesh parse, nothing else."""
  code = cli.main(["solve", "--model", "transformer_tiny", "--topology",
                   "tpu-v5e-2x4", "--mesh", "data:2;model:4",
                   "--time-limit", "60", "-f", "json"])
  assert code == 0, capsys.readouterr().out
  assert counts == {"topology": ["tpu-v5e-2x4"], "mesh": ["data:2;model:4"],
                    "zero_stage": []}
