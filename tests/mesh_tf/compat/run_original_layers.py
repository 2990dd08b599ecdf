"""Runs tests/mesh_tf/compat/layer_cases.py on the original Mesh TF 0.1.21
(one device, a tf.compat.v1 Session) and prints, per case, the output's
shape and value and the variables' names, shapes and initial slice values,
as JSON.  Run in a subprocess by test_compat_layer_calls.py when
``mesh_tensorflow`` is installed (it needs benchmarks/mtf_port.py's shims)."""

import importlib.util
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)


def _shim():
  spec = importlib.util.spec_from_file_location(
      "mtf_port", os.path.join(ROOT, "benchmarks", "mtf_port.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  module._shim_original()  # pylint: disable=protected-access


def main():
  _shim()
  import mesh_tensorflow as mtfo  # pylint: disable=g-import-not-at-top
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  from tests.mesh_tf.compat import layer_cases  # pylint: disable=g-import-not-at-top

  def imp(mesh, value, dims):
    return mtfo.import_tf_tensor(mesh, tf.constant(value), mtfo.Shape(dims))

  out = {}
  for name, case in layer_cases.CASES.items():
    with tf.Graph().as_default():
      graph = mtfo.Graph()
      mesh = mtfo.Mesh(graph, "m")
      y = case(mtfo, mesh, imp, tf.constant_initializer, tf)
      impl = mtfo.placement_mesh_impl.PlacementMeshImpl([], {}, [""])
      lowering = mtfo.Lowering(graph, {mesh: impl})
      y_tf = lowering.export_to_tf_tensor(y)
      slices = [lowering.variables[v].laid_out_tensor.all_slices[0]
                 for v in graph.all_variables]
      with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(lowering.copy_masters_to_slices())
        y_value, values = sess.run([y_tf, slices])
      out[name] = {
          "shape": [[d.name, d.size] for d in y.shape.dims],
          "value": y_value.tolist(),
          "variables": [[v.name, [[d.name, d.size] for d in v.shape.dims],
                         value.tolist()]
                        for v, value in zip(graph.all_variables, values)]}
  out["port_example"] = example_variables(original=True)
  print(json.dumps(out))


def example_variables(original):
  """[(name, [sizes])] of examples/port_from_mesh_tensorflow.py's 2-layer
  model, sorted; on the original, only its import line is changed."""
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  path = os.path.join(ROOT, "examples", "port_from_mesh_tensorflow.py")
  source = open(path).read()
  if original:
    source = source.replace("import mesh_tf as mtf",
                            "import mesh_tensorflow as mtf", 1)
  example = {"__name__": "port_example", "__file__": path}
  exec(compile(source, path, "exec"), example)  # pylint: disable=exec-used
  hp = example["parse_args"](["--model_dir", "/nonexistent",
                              "--num_layers", "2"])
  mtf = example["mtf"]
  with tf.Graph().as_default():
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "m")
    tokens = tf.zeros([hp.batch, hp.length], tf.int32)
    example["transformer_lm"](mesh, tokens, tokens, hp)
    return sorted([v.name, [d.size for d in v.shape.dims]]
                  for v in graph.all_variables)


if __name__ == "__main__":
  main()
