"""The examples in the pipeline's docstrings run (shape-only: no devices)."""

import doctest
import importlib

import pytest

MODULES = ["mesh_tf.pipeline.spec", "mesh_tf.pipeline.schedule",
           "mesh_tf.pipeline.costs", "mesh_tf.pipeline.step",
           "mesh_tf.models.transformer"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
  result = doctest.testmod(importlib.import_module(name))
  assert result.failed == 0
  assert result.attempted > 0
