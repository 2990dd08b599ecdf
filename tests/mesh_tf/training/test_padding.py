"""A padded data-parallel dim: the step runs the padded size, masks the
padded rows out of the loss and equals the unpadded single-device step
(loss and updated weights), with data and tensor parallelism and
microbatches; the padded lowering's collectives are those the cost model
predicts for the graph at the padded size; impossible paddings raise
typed errors that name the dim and the mesh axes."""

import dataclasses

import numpy as np
import pytest

import costmodels
import mesh_tf as mtf
from tests.mesh_tf.training.padding_reference import reference_step
from mesh_tf import models
from mesh_tf.training import optimize, train_step_for_model
from mesh_tf.training.padding import (Padding, PaddingError, check_padding,
                                      pad_loss, padding_for)

LR = 0.5
LM = models.TransformerConfig(layers=2)
TP_RULES = "batch:data;d_ff:model;heads:model;vocab:model"


def _reference(config):
  return reference_step(config, LR)


@pytest.fixture(scope="module")
def references():
  return {b: _reference(dataclasses.replace(LM, batch=b)) for b in (6, 13)}


@pytest.mark.parametrize("batch,mesh,rules,k", [
    (6, "data:4", "batch:data", 1),
    (6, "data:8", "batch:data", 1),
    (13, "data:8", "batch:data", 1),
    (13, "data:4;model:2", TP_RULES, 1),
])
def test_padded_step_equals_the_unpadded_step(references, batch, mesh, rules,
                                              k):
  values, loss, weights = references[batch]
  padding = padding_for("batch", batch, mesh, rules, microbatches=k)
  assert padding.rows > 0 and padding.padded_size % k == 0
  model = dataclasses.replace(LM, batch=padding.padded_size // k).build()
  n = mtf.convert_to_shape(mesh).size
  step = train_step_for_model(model, mesh, rules, mtf.logical_cpu_devices(n),
                              optimize.SgdOptimizer(LR), microbatches=k,
                              padding=padding)
  assert float(step(**values)) == pytest.approx(loss, rel=1e-6)
  got = step.variable_values()
  for name, w in weights.items():
    np.testing.assert_allclose(got[name], w, atol=1e-6, rtol=1e-5,
                               err_msg=name)
  if k == 1:
    # The padded lowering's collectives are the cost model's prediction
    # for the graph at the padded size: the mask adds none.
    ran = sorted(c.key() for c in step.mesh_impl.trace.collectives)
    predicted = costmodels.trace_graph(model.graph, mesh, rules)
    assert sorted(c.key() for c in predicted.collectives) == ran
    unpadded = dataclasses.replace(LM, batch=padding.padded_size).build()
    train_step_for_model(unpadded, mesh, rules, mtf.logical_cpu_devices(n),
                         optimize.SgdOptimizer(LR))
    predicted = costmodels.trace_graph(unpadded.graph, mesh, rules)
    assert sorted(c.key() for c in predicted.collectives) == ran


@pytest.mark.parametrize("mesh,rules,k", [
    ("data:8", "batch:data", 1),
    ("data:4;model:2", "batch:data;d_ff:model", 2)])
def test_a_mean_mlp_loss_is_the_mean_of_the_real_rows(mesh, rules, k):
  """With microbatches too: the padded rows fill the last microbatch."""
  config = models.MLPConfig(layers=2, batch=5)
  values, loss, weights = _reference(config)
  padding = padding_for("batch", 5, mesh, rules, microbatches=k)
  model = dataclasses.replace(config, batch=padding.padded_size // k).build()
  step = train_step_for_model(model, mesh, rules,
                              mtf.logical_cpu_devices(8),
                              optimize.SgdOptimizer(LR), padding=padding,
                              microbatches=k)
  assert float(step(**values)) == pytest.approx(loss, rel=1e-6)
  got = step.variable_values()
  for name, w in weights.items():
    np.testing.assert_allclose(got[name], w, atol=1e-6, rtol=1e-5,
                               err_msg=name)


def test_a_sum_loss_is_the_sum_of_the_real_rows():
  def build(rows):
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "m")
    x = mtf.import_tf_tensor(mesh, None, f"batch:{rows};d:4",
                             dtype="float32")
    w = mtf.get_variable(mesh, "w", "d:4;k:2")
    loss = mtf.reduce_sum(mtf.square(mtf.einsum([x, w], f"batch:{rows};k:2",
                                                name="y")))
    return graph, mesh, loss, x
  x_value = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
  graph, mesh, loss, x = build(3)
  ref = mtf.training.TrainStep(graph, mesh, loss, [x],
                               mtf.PlacementMeshImpl(
                                   "data:1", "", mtf.logical_cpu_devices(1)),
                               optimize.SgdOptimizer(0.1))
  want = float(ref(x_value))
  graph, mesh, loss, x = build(4)
  step = mtf.training.TrainStep(graph, mesh, loss, [x],
                                mtf.PlacementMeshImpl(
                                    "data:4", "batch:data",
                                    mtf.logical_cpu_devices(4)),
                                optimize.SgdOptimizer(0.1),
                                padding=Padding("batch", 3, 4))
  assert float(step(x_value)) == pytest.approx(want, rel=1e-6)
  np.testing.assert_allclose(step.variable_values()["w"],
                             ref.variable_values()["w"], rtol=1e-6)


def test_impossible_paddings_name_the_dim_and_the_mesh_axes():
  with pytest.raises(PaddingError, match=r"batch=13 padded to batch=14 does "
                     r"not split over data=8 \(= 8\); pad it to batch=16"):
    check_padding(Padding("batch", 13, 14), "data:8", "batch:data")
  with pytest.raises(PaddingError, match=r"over data=4 x microbatches=2 "
                     r"\(= 8\); pad it to batch=16"):
    check_padding(Padding("batch", 13, 14), "data:4;model:2",
                  "batch:data", microbatches=2)
  with pytest.raises(PaddingError, match=r"at least the real size batch=8"):
    Padding("batch", 8, 6).check()
  with pytest.raises(PaddingError, match=r"at least the real size batch=8"):
    Padding.from_dict({"dim": "batch", "real_size": 8, "padded_size": 6})
  with pytest.raises(PaddingError, match=r"a padding is a dict of"):
    Padding.from_dict({"dim": "batch", "real_size": 8})
  model = dataclasses.replace(LM, batch=16).build()
  with pytest.raises(PaddingError, match=r"input inputs has batch=16 per "
                     r"step .* but the padding runs batch=8"):
    train_step_for_model(model, "data:8", "batch:data",
                         mtf.logical_cpu_devices(8),
                         optimize.SgdOptimizer(LR),
                         padding=Padding("batch", 7, 8))
  with pytest.raises(PaddingError, match=r"no input has the padded dim "
                     r"rows=3"):
    train_step_for_model(model, "data:8", "batch:data",
                         mtf.logical_cpu_devices(8),
                         optimize.SgdOptimizer(LR),
                         padding=Padding("rows", 3, 8))


def test_a_loss_whose_rows_meet_before_it_cannot_be_padded():
  """Padding a dim that an op reduces before the loss (here a batch mean
  subtracted from every row, as a batch norm does) would change the real
  rows: forbidden, naming the op."""
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.import_tf_tensor(mesh, None, "batch:8;d:4", dtype="float32")
  w = mtf.get_variable(mesh, "w", "d:4")
  y = x * w
  centred = y - mtf.reduce_mean(y, output_shape="d:4", name="batch_mean")
  loss = mtf.reduce_mean(mtf.square(centred))
  with pytest.raises(PaddingError, match=r"reduces it in \['batch_mean "
                     r"\(ReduceOperation\)', .*use idle devices"):
    pad_loss(loss, Padding("batch", 7, 8))


def test_docstring_examples():
  import doctest
  from mesh_tf.training import padding
  result = doctest.testmod(padding)
  assert result.failed == 0 and result.attempted > 0
