"""The examples in the costmodels docstrings run."""

import doctest
import importlib

import pytest

MODULES = ["costmodels", "costmodels.hardware", "costmodels.topology",
           "costmodels.topology.presets",
           "costmodels.collectives", "costmodels.compute",
           "costmodels.memory", "costmodels.evaluate",
           "costmodels.collective_fits", "costmodels.calibrate.least_squares",
           "costmodels.calibrate.threaded_kernel",
           "costmodels.calibrate.overlap_fit",
           "costmodels.calibrate.step_costs",
           "costmodels.calibrate.compute_fit",
           "costmodels.calibrate.topology_file", "costmodels.overlap",
           "costmodels.prefetch", "costmodels.shared_cores"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
  result = doctest.testmod(importlib.import_module(name))
  assert result.failed == 0
  assert result.attempted > 0
