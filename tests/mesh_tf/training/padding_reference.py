"""The unpadded single-device step that padded steps must equal."""

import mesh_tf as mtf
from mesh_tf.training import optimize, train_step_for_model


def reference_step(config, learning_rate):
  """``(inputs, loss, updated weights)`` of one SGD step of ``config``'s
  model on one device."""
  model = config.build()
  values = model.random_values()
  step = train_step_for_model(model, "data:1", "", mtf.logical_cpu_devices(1),
                              optimize.SgdOptimizer(learning_rate))
  return values, float(step(**values)), step.variable_values()
