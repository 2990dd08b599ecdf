"""A Mesh TensorFlow training program, ported by changing one import line.

Everything below is written as a Mesh TensorFlow 0.1.x user would write it
(``benchmarks/mtf_port.py`` runs this very file on mesh_tensorflow 0.1.21
too):

- ``tf.compat.v1`` graph mode, variable scopes, placeholders and a
  ``MonitoredTrainingSession``;
- a Transformer language model from ``mtf.get_variable``, ``mtf.einsum``,
  ``mtf.layers.dense`` and ``mtf.layers.layer_norm``;
- ``mtf.gradients`` and ``mtf.optimize.SgdOptimizer`` /
  ``AdafactorOptimizer``;
- ``mtf.Lowering(graph, {mesh: mesh_impl})``, ``lowering.export_to_tf_tensor``
  and ``lowering.lowered_operation``;
- checkpoints of the *master* variables through ``tf.train.Saver``, with
  ``mtf.MtfRestoreHook`` (``copy_masters_to_slices`` after restore) and
  ``mtf.MtfCheckpointSaverListener`` (``copy_slices_to_masters`` before save).

The only line that differs from the original program is the import of
``mesh_tf as mtf``.  The task is memorising a fixed synthetic batch, so the
loss falls within a few steps.  Checkpoints hold full (unsliced) variables,
so a run may restore another run's checkpoint under a different mesh and
layout.

Run (8 logical CPU devices)::

  python examples/port_from_mesh_tensorflow.py --model_dir /tmp/port --steps 20
"""

import argparse
import time

import mesh_tf as mtf  # The original: import mesh_tensorflow as mtf
import numpy as np
import tensorflow.compat.v1 as tf


def synthetic_batch(batch, length, vocab, seed=0):
  """Token ids whose next token is a fixed permutation of the current one."""
  rng = np.random.RandomState(seed)
  perm = rng.permutation(vocab)
  ids = [rng.randint(0, vocab, size=(batch, 1))]
  for _ in range(length):
    ids.append(perm[ids[-1]])
  ids = np.concatenate(ids, axis=1).astype(np.int32)
  return ids[:, :-1], ids[:, 1:]


def attention(x, mask, heads_dim, kv_dim, memory_length_dim):
  """Multi-head self-attention written with einsums, as in the original's
  toy models."""
  model_dim = x.shape.dims[-1]
  q = mtf.layers.dense(x, [heads_dim, kv_dim], reduced_dims=[model_dim],
                       use_bias=False, name="q")
  k = mtf.layers.dense(x, [heads_dim, kv_dim], reduced_dims=[model_dim],
                       use_bias=False, name="k")
  v = mtf.layers.dense(x, [heads_dim, kv_dim], reduced_dims=[model_dim],
                       use_bias=False, name="v")
  length_dim = x.shape.dims[-2]
  k = mtf.rename_dimension(k, length_dim.name, memory_length_dim.name)
  v = mtf.rename_dimension(v, length_dim.name, memory_length_dim.name)
  logits = mtf.einsum([q, k], reduced_dims=[kv_dim]) * (kv_dim.size ** -0.5)
  weights = mtf.softmax(logits + mask, memory_length_dim)
  o = mtf.einsum([weights, v], reduced_dims=[memory_length_dim])
  return mtf.layers.dense(o, model_dim, reduced_dims=[heads_dim, kv_dim],
                          use_bias=False, name="o")


def transformer_lm(mesh, inputs, targets, hp):
  """Logits and mean loss of a decoder-only Transformer."""
  batch_dim = mtf.Dimension("batch", hp.batch)
  length_dim = mtf.Dimension("length", hp.length)
  memory_length_dim = mtf.Dimension("memory_length", hp.length)
  model_dim = mtf.Dimension("d_model", hp.d_model)
  heads_dim = mtf.Dimension("heads", hp.heads)
  kv_dim = mtf.Dimension("d_kv", hp.d_model // hp.heads)
  ff_dim = mtf.Dimension("d_ff", hp.d_ff)
  vocab_dim = mtf.Dimension("vocab", hp.vocab)

  inputs = mtf.import_tf_tensor(mesh, inputs, mtf.Shape([batch_dim, length_dim]))
  targets = mtf.import_tf_tensor(mesh, targets,
                                 mtf.Shape([batch_dim, length_dim]))
  embedding = mtf.get_variable(
      mesh, "embedding", mtf.Shape([vocab_dim, model_dim]),
      initializer=tf.random_normal_initializer(stddev=0.1))
  x = mtf.gather(embedding, inputs, vocab_dim)
  # Causal mask: -1e9 where a query would see a later position.
  mask = mtf.cast(mtf.less(mtf.range(mesh, length_dim, tf.int32),
                           mtf.range(mesh, memory_length_dim, tf.int32)),
                  tf.float32) * -1e9
  for layer in range(hp.num_layers):
    with tf.variable_scope("layer_%d" % layer):
      with tf.variable_scope("self_attention"):
        y = mtf.layers.layer_norm(x, model_dim, name="layer_norm")
        x += attention(y, mask, heads_dim, kv_dim, memory_length_dim)
      with tf.variable_scope("ffn"):
        y = mtf.layers.layer_norm(x, model_dim, name="layer_norm")
        h = mtf.layers.dense(y, ff_dim, reduced_dims=[model_dim],
                             activation=mtf.relu, name="wi")
        x += mtf.layers.dense(h, model_dim, reduced_dims=[ff_dim], name="wo")
  x = mtf.layers.layer_norm(x, model_dim, name="final_layer_norm")
  logits = mtf.einsum([x, embedding], reduced_dims=[model_dim])
  loss = mtf.layers.softmax_cross_entropy_with_logits(
      logits, mtf.one_hot(targets, vocab_dim, dtype=logits.dtype), vocab_dim)
  return logits, mtf.reduce_mean(loss)


def build(hp, devices):
  """The TF graph of one training step: placeholders, loss, train op, and the
  Mesh TensorFlow lowering."""
  tf.set_random_seed(hp.seed)
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "my_mesh")
  tf_inputs = tf.placeholder(tf.int32, [hp.batch, hp.length], name="inputs")
  tf_targets = tf.placeholder(tf.int32, [hp.batch, hp.length], name="targets")
  _, loss = transformer_lm(mesh, tf_inputs, tf_targets, hp)

  var_grads = mtf.gradients(
      [loss], [v.outputs[0] for v in graph.trainable_variables])
  if hp.optimizer == "adafactor":
    optimizer = mtf.optimize.AdafactorOptimizer()
  else:
    optimizer = mtf.optimize.SgdOptimizer(hp.learning_rate)
  update_ops = optimizer.apply_grads(var_grads, graph.trainable_variables)

  mesh_shape = mtf.convert_to_shape(hp.mesh_shape)
  layout_rules = mtf.convert_to_layout_rules(hp.layout)
  mesh_impl = mtf.placement_mesh_impl.PlacementMeshImpl(
      mesh_shape, layout_rules, devices)
  lowering = mtf.Lowering(graph, {mesh: mesh_impl})
  restore_hook = mtf.MtfRestoreHook(lowering)

  global_step = tf.train.get_or_create_global_step()
  tf_loss = tf.cast(lowering.export_to_tf_tensor(loss), tf.float32)
  tf_update_ops = [lowering.lowered_operation(op) for op in update_ops]
  tf_update_ops.append(tf.assign_add(global_step, 1))
  train_op = tf.group(tf_update_ops)
  return dict(inputs=tf_inputs, targets=tf_targets, loss=tf_loss,
              train_op=train_op, global_step=global_step,
              lowering=lowering, restore_hook=restore_hook)


def train(hp):
  """Trains ``hp.steps`` steps, restoring from and saving to
  ``hp.model_dir``; returns the losses."""
  devices = ["/cpu:%d" % i for i in range(hp.num_devices)]
  t0 = time.time()
  model = build(hp, devices)
  saver = tf.train.Saver(tf.global_variables(), sharded=True, max_to_keep=3,
                         save_relative_paths=True)
  tf.add_to_collection(tf.GraphKeys.SAVERS, saver)
  saver_listener = mtf.MtfCheckpointSaverListener(model["lowering"])
  saver_hook = tf.train.CheckpointSaverHook(
      hp.model_dir, save_steps=hp.save_steps, saver=saver,
      listeners=[saver_listener])
  print("graph built and lowered in %.1f s" % (time.time() - t0))

  inputs, targets = synthetic_batch(hp.batch, hp.length, hp.vocab)
  config = tf.ConfigProto(device_count={"CPU": hp.num_devices},
                          inter_op_parallelism_threads=2,
                          intra_op_parallelism_threads=1)
  losses = []
  with tf.train.MonitoredTrainingSession(
      checkpoint_dir=hp.model_dir, scaffold=tf.train.Scaffold(saver=saver),
      hooks=[model["restore_hook"], saver_hook], config=config,
      save_checkpoint_secs=None, save_checkpoint_steps=None,
      save_summaries_steps=None, save_summaries_secs=None,
      log_step_count_steps=None) as sess:
    for _ in range(hp.steps):
      t1 = time.time()
      step, loss_value, _ = sess.run(
          [model["global_step"], model["loss"], model["train_op"]],
          feed_dict={model["inputs"]: inputs, model["targets"]: targets})
      losses.append(float(loss_value))
      print("step %d loss %.6f (%.0f ms)" % (step, loss_value,
                                             1000 * (time.time() - t1)))
  return losses


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model_dir", required=True)
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--save_steps", type=int, default=1000)
  parser.add_argument("--num_layers", type=int, default=2)
  parser.add_argument("--d_model", type=int, default=128)
  parser.add_argument("--heads", type=int, default=8)
  parser.add_argument("--d_ff", type=int, default=512)
  parser.add_argument("--vocab", type=int, default=256)
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--length", type=int, default=64)
  parser.add_argument("--optimizer", choices=["sgd", "adafactor"],
                      default="adafactor")
  parser.add_argument("--learning_rate", type=float, default=0.1)
  parser.add_argument("--mesh_shape", default="rows:2;cols:4")
  parser.add_argument("--layout",
                      default="batch:rows;heads:cols;d_ff:cols;vocab:cols")
  parser.add_argument("--num_devices", type=int, default=8)
  parser.add_argument("--seed", type=int, default=1)
  return parser.parse_args(argv)


if __name__ == "__main__":
  tf.disable_v2_behavior()
  train(parse_args())
