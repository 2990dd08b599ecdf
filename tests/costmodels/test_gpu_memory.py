"""Predicted peak memory against what a GPU really allocates.

Runs only where TensorFlow sees a GPU (skipped cleanly elsewhere): one
training step of a zoo Transformer on one GPU, with the allocator's peak
reset after warm-up, against ``costmodels.evaluate(...).peak_memory_bytes``
of the same training graph.  The memory model counts every live tensor of a
memory-minimising schedule, with the variables, their gradients and the
optimizer's state; TF's allocator adds fragmentation and workspace, and its
executor may order ops differently, so the bound is loose.
"""

import pytest
import tensorflow as tf

GPUS = tf.config.list_physical_devices("GPU")
pytestmark = pytest.mark.skipif(not GPUS, reason="no GPU on this machine")


def _training_graph(build):
  from mesh_tf.training import optimize
  from mesh_tf.gradients import gradients
  model = build()
  variables = list(model.graph.trainable_variables)
  grads = gradients([model.loss], [v.outputs[0] for v in variables])
  optimize.SgdOptimizer(0.01).apply_grads(grads, variables)
  return model


def test_predicted_peak_is_near_the_gpu_allocator_peak():
  import costmodels
  from mesh_tf import models, training
  from mesh_tf.training import optimize

  def build():
    return models.transformer_lm(layers=2, d_model=512, heads=8, d_kv=64,
                                 d_ff=2048, vocab=8192, length=256, batch=16)
  predicted = costmodels.evaluate(_training_graph(build).graph, "x:1", "",
                                  "dgx-h100").peak_memory_bytes
  device = tf.config.list_logical_devices("GPU")[0].name
  model = build()
  step = training.train_step_for_model(model, "x:1", "", [device],
                                       optimize.SgdOptimizer(0.01))
  feeds = model.random_values(seed=1)
  step(**feeds).numpy()
  tf.config.experimental.reset_memory_stats("GPU:0")
  step(**feeds).numpy()
  measured = tf.config.experimental.get_memory_info("GPU:0")["peak"]
  print(f"peak memory: predicted {predicted / 2**20:.1f} MiB, GPU allocator "
        f"{measured / 2**20:.1f} MiB ({measured / predicted:.2f}x)")
  assert 0.5 <= measured / predicted <= 2.0
