"""Train a tiny Transformer LM on synthetic data on 8 logical CPU devices.

The model is the zoo's decoder-only Transformer (``mesh_tf.models``).  It is
laid out with data parallelism over ``rows`` and Megatron-style model
parallelism over ``cols``::

    mesh   rows:2;cols:4
    layout batch:rows;d_ff:cols;heads:cols;vocab:cols

Each step -- forward, backward and the optimizer update -- runs as ONE
``tf.function`` (``mesh_tf.training.TrainStep``); the mtf graph is lowered
while that function is traced.  The task is to copy a fixed sequence that
the model sees shifted: a synthetic problem the model can fit, so the loss
visibly falls.  At the end the variables are saved to a TF checkpoint and
restored under a different layout on 4 devices, to show that a layout
change loses nothing.

Run:
  python examples/train_transformer.py --steps 30
"""

import argparse
import os
import sys
import tempfile
import time

MESH = "rows:2;cols:4"
LAYOUT = "batch:rows;d_ff:cols;heads:cols;vocab:cols"


def _setup_tf(num_devices):
  import mesh_tf as mtf  # pylint: disable=import-outside-toplevel
  tf = mtf.set_logical_cpu_devices(num_devices)
  return tf


def synthetic_batch(batch, length, vocab, seed=0):
  """Token ids whose next token is a fixed function of the current one."""
  import numpy as np
  rng = np.random.RandomState(seed)
  perm = rng.permutation(vocab)
  first = rng.randint(0, vocab, size=(batch, 1))
  seq = [first]
  for _ in range(length):
    seq.append(perm[seq[-1]])
  ids = np.concatenate(seq, axis=1).astype("int32")
  return ids[:, :-1], ids[:, 1:]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--steps", type=int, default=30)
  parser.add_argument("--layers", type=int, default=2)
  parser.add_argument("--learning-rate", type=float, default=0.01)
  args = parser.parse_args(argv)

  _setup_tf(8)
  import mesh_tf as mtf
  from mesh_tf import models, training
  from mesh_tf.training import optimize

  sizes = dict(layers=args.layers, d_model=32, heads=4, d_kv=8, d_ff=64,
               vocab=32, length=16, batch=8)
  model = models.transformer_lm(**sizes)
  print(f"model: {model.num_parameters} parameters, "
        f"{len(model.graph.operations)} mtf ops before autodiff")
  step = training.train_step_for_model(
      model, MESH, LAYOUT, mtf.logical_cpu_devices(8),
      optimize.AdamWeightDecayOptimizer(args.learning_rate,
                                        weight_decay_rate=0.01))
  print(f"with gradients and Adam: {len(model.graph.operations)} mtf ops")
  inputs, targets = synthetic_batch(8, 16, 32)
  t0 = time.perf_counter()
  fn = step.concrete_function()
  print(f"lowered on {MESH} ({LAYOUT}) in {time.perf_counter() - t0:.1f} s: "
        f"{len(fn.graph.get_operations())} TF ops in the step")
  losses = []
  for i in range(args.steps):
    losses.append(float(step(inputs=inputs, targets=targets)))
    if i % 5 == 0 or i == args.steps - 1:
      print(f"step {i:3d}  loss {losses[-1]:.4f}")
  trace = step.mesh_impl.trace
  kinds = {}
  for c in trace.collectives:
    kinds[(c.kind, c.mesh_axes)] = kinds.get((c.kind, c.mesh_axes), 0) + 1
  print("collectives per step:", ", ".join(
      f"{n} {k}/{'+'.join(a)}" for (k, a), n in sorted(kinds.items())))

  # Save, then restore under another layout on 4 devices.
  with tempfile.TemporaryDirectory() as tmp:
    prefix = step.save(os.path.join(tmp, "model"))
    other = models.transformer_lm(**sizes)
    step4 = training.train_step_for_model(
        other, "x:4", "heads:x;d_ff:x", mtf.logical_cpu_devices(4),
        optimize.AdamWeightDecayOptimizer(args.learning_rate,
                                          weight_decay_rate=0.01))
    step4.restore(prefix)
    same = all((a == b).all() for a, b in zip(
        step.variable_values().values(), step4.variable_values().values()))
    print(f"restored on x:4 (heads:x;d_ff:x): values identical: {same}")
    next8 = float(step(inputs=inputs, targets=targets))
    next4 = float(step4(inputs=inputs, targets=targets))
    print(f"next step loss: 8 devices {next8:.5f}, 4 devices {next4:.5f}")
  ok = losses[-1] < losses[0] and same
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
