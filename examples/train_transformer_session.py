"""A Mesh TensorFlow training loop in the original's own order, run
unmodified on mesh-tf (only ``import mesh_tensorflow as mtf`` became
``import mesh_tf as mtf``).

The order is the one the original's programs use in a ``tf.compat.v1``
Session: build the mtf graph, its gradients and optimizer updates; lower
it with ``mtf.Lowering``; THEN build ``tf.global_variables_initializer()``
and ``lowering.copy_masters_to_slices()``; run the initializer, then the
copy; then step.  The initializer covers the master variables because, as
in the original, they exist once lowering is done.

The model is a decoder-only Transformer written with ``mtf.layers`` (the
original's names, ``final/layer_norm`` included), memorising a fixed
synthetic batch, so its loss falls within a few steps.

Run (8 logical CPU devices)::

  python examples/train_transformer_session.py --steps 10
"""

import argparse

import mesh_tf as mtf  # The original: import mesh_tensorflow as mtf
import tensorflow.compat.v1 as tf
# The synthetic batch of this folder's other port example (the script's own
# folder is first on sys.path).
from port_from_mesh_tensorflow import synthetic_batch


def model(mesh, inputs, targets, hp):
  """Mean cross-entropy of a pre-norm decoder-only Transformer."""
  batch = mtf.Dimension("batch", hp.batch)
  length = mtf.Dimension("length", hp.length)
  d_model = mtf.Dimension("d_model", hp.d_model)
  heads = mtf.Dimension("heads", hp.heads)
  d_kv = mtf.Dimension("d_kv", hp.d_model // hp.heads)
  d_ff = mtf.Dimension("d_ff", hp.d_ff)
  vocab = mtf.Dimension("vocab", hp.vocab)
  inputs = mtf.import_tf_tensor(mesh, inputs, mtf.Shape([batch, length]))
  targets = mtf.import_tf_tensor(mesh, targets, mtf.Shape([batch, length]))
  embedding = mtf.get_variable(
      mesh, "embedding", mtf.Shape([vocab, d_model]),
      initializer=tf.random_normal_initializer(stddev=0.1))
  x = mtf.gather(embedding, inputs, vocab)
  mask = mtf.layers.attention_mask_autoregressive(
      mtf.range(mesh, length, tf.int32), dtype=tf.float32)
  for i in range(hp.num_layers):
    with tf.variable_scope("layer_%d" % i):
      with tf.variable_scope("self_attention"):
        y = mtf.layers.layer_norm(x, d_model, name="layer_norm")
        x += mtf.layers.multihead_attention(
            y, None, mask, d_kv, heads, name="attention")
      with tf.variable_scope("ffn"):
        y = mtf.layers.layer_norm(x, d_model, name="layer_norm")
        h = mtf.layers.dense(y, d_ff, activation=mtf.relu, name="wi")
        x += mtf.layers.dense(h, d_model, name="wo")
  with tf.variable_scope("final"):
    x = mtf.layers.layer_norm(x, d_model, name="layer_norm")
  logits = mtf.einsum([x, embedding], reduced_dims=[d_model])
  loss = mtf.layers.softmax_cross_entropy_with_logits(
      logits, mtf.one_hot(targets, vocab, dtype=logits.dtype), vocab)
  return mtf.reduce_mean(loss)


def train(hp):
  """Builds, lowers and trains ``hp.steps`` steps; returns the losses."""
  tf.set_random_seed(hp.seed)
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "my_mesh")
  tf_inputs = tf.placeholder(tf.int32, [hp.batch, hp.length], name="inputs")
  tf_targets = tf.placeholder(tf.int32, [hp.batch, hp.length], name="targets")
  loss = model(mesh, tf_inputs, tf_targets, hp)
  var_grads = mtf.gradients(
      [loss], [v.outputs[0] for v in graph.trainable_variables])
  optimizer = mtf.optimize.AdafactorOptimizer()
  update_ops = optimizer.apply_grads(var_grads, graph.trainable_variables)

  devices = ["/cpu:%d" % i for i in range(hp.num_devices)]
  mesh_impl = mtf.placement_mesh_impl.PlacementMeshImpl(
      mtf.convert_to_shape(hp.mesh_shape),
      mtf.convert_to_layout_rules(hp.layout), devices)
  lowering = mtf.Lowering(graph, {mesh: mesh_impl})
  tf_loss = lowering.export_to_tf_tensor(loss)
  train_op = tf.group([lowering.lowered_operation(op) for op in update_ops])

  # The original's order: the initializer first, then the copy.
  init = tf.global_variables_initializer()
  restore = lowering.copy_masters_to_slices()

  inputs, targets = synthetic_batch(hp.batch, hp.length, hp.vocab)
  feed = {tf_inputs: inputs, tf_targets: targets}
  config = tf.ConfigProto(device_count={"CPU": hp.num_devices},
                          inter_op_parallelism_threads=2,
                          intra_op_parallelism_threads=1)
  losses = []
  with tf.Session(config=config) as sess:
    sess.run(init)
    sess.run(restore)
    for step in range(1, hp.steps + 1):
      loss_value, _ = sess.run([tf_loss, train_op], feed_dict=feed)
      losses.append(float(loss_value))
      print("step %d loss %.6f" % (step, loss_value))
  return losses


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--num_layers", type=int, default=2)
  parser.add_argument("--d_model", type=int, default=64)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--d_ff", type=int, default=128)
  parser.add_argument("--vocab", type=int, default=64)
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--length", type=int, default=16)
  parser.add_argument("--mesh_shape", default="rows:2;cols:4")
  parser.add_argument("--layout",
                      default="batch:rows;heads:cols;d_ff:cols;vocab:cols")
  parser.add_argument("--num_devices", type=int, default=8)
  parser.add_argument("--seed", type=int, default=1)
  return parser.parse_args(argv)


if __name__ == "__main__":
  tf.disable_v2_behavior()
  train(parse_args())
