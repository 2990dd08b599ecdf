"""Decode with a tiny Transformer LM split over 8 logical CPU devices.

The model is the zoo's decoder-only Transformer (``mesh_tf.models``).  By
default it is first trained for a few steps on the synthetic task of
``examples/train_transformer.py`` (the next token is a fixed permutation of
the current one), saved to a checkpoint, and that checkpoint is restored
into the one-token decoding step (``mesh_tf.decoding``), laid out for
low-latency decoding at batch size 1::

    mesh   model:8
    layout heads:model;d_ff:model;vocab:model

The step is lowered once (one ``tf.function``) and called for every token;
its key/value cache ``[batch, heads, memory_length, d_kv]`` stays on the
devices, split by heads like the attention weights.  The example decodes
greedily, samples (temperature, top-k, fixed seed) and runs beam search,
checks that the tokens are the same on one device, and prints the
per-token latency.

Run:
  python examples/decode_transformer.py                  # train, then decode
  python examples/decode_transformer.py --train-steps 0  # random weights
  python examples/decode_transformer.py --checkpoint /tmp/ckpt/model
"""

import argparse
import os
import sys
import tempfile
import time

MESH, LAYOUT = "model:8", "heads:model;d_ff:model;vocab:model"
TRAIN_MESH = "rows:2;cols:4"
TRAIN_LAYOUT = "batch:rows;d_ff:cols;heads:cols;vocab:cols"


def _setup_tf(num_devices):
  import mesh_tf as mtf  # pylint: disable=import-outside-toplevel
  tf = mtf.set_logical_cpu_devices(num_devices)
  return tf


def synthetic_batch(batch, length, vocab, seed=0):
  """Sequences whose next token is ``perm[current]`` (one fixed
  permutation), starting at random tokens drawn with ``seed``; and
  ``perm``."""
  import numpy as np
  perm = np.random.RandomState(1234).permutation(vocab)
  rng = np.random.RandomState(seed)
  seq = [rng.randint(0, vocab, size=(batch, 1))]
  for _ in range(length - 1):
    seq.append(perm[seq[-1]])
  return np.concatenate(seq, axis=1).astype("int32"), perm


def train(config, steps, path, devices):
  """Trains ``config`` for ``steps`` and saves it to ``path``."""
  import mesh_tf  # noqa: F401
  from mesh_tf.training.optimize import AdamWeightDecayOptimizer
  from mesh_tf.training import train_step_for_model
  model = config.build()
  step = train_step_for_model(model, TRAIN_MESH, TRAIN_LAYOUT, devices,
                              AdamWeightDecayOptimizer(0.01))
  for i in range(steps):
    ids, _ = synthetic_batch(config.batch, config.length + 1, config.vocab,
                             seed=i)
    loss = float(step(inputs=ids[:, :-1], targets=ids[:, 1:]))
    if i % 20 == 0 or i == steps - 1:
      print(f"  train step {i:3d}  loss {loss:.3f}")
  return step.save(path)


def _timed(fn):
  t0 = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - t0


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--train-steps", type=int, default=60)
  parser.add_argument("--checkpoint", default=None,
                      help="restore this checkpoint (of the same config)")
  parser.add_argument("--new-tokens", type=int, default=12)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args(argv)
  _setup_tf(8)
  import numpy as np
  import mesh_tf as mtf
  from mesh_tf import models
  from mesh_tf.decoding import (DecodeStep, beam_search, decoding_graph,
                                greedy_decode, sample_decode)

  config = models.TransformerConfig(layers=2, d_model=32, heads=8, d_kv=4,
                                    d_ff=64, vocab=64, length=16, batch=16)
  devices = mtf.logical_cpu_devices(8)
  path = args.checkpoint
  if path is None and args.train_steps > 0:
    print(f"training {args.train_steps} steps on {TRAIN_MESH} "
          f"({TRAIN_LAYOUT})")
    path = train(config, args.train_steps,
                 os.path.join(tempfile.mkdtemp(), "model"), devices)
  _, perm = synthetic_batch(1, 2, config.vocab, seed=0)
  prompt = np.array([[5, perm[5], perm[perm[5]]]], np.int32)
  n = args.new_tokens

  def steps_for(decoding):
    out = []
    for mesh, layout, devs in ((MESH, LAYOUT, devices),
                               ("single:1", "", devices[:1])):
      s = DecodeStep(decoding, mesh, layout, devs)
      if path:
        s.restore(path)
      out.append(s)
    return out

  print(f"\ndecoding on {MESH} ({LAYOUT}), batch 1, "
        f"{'checkpoint ' + path if path else 'random weights'}")
  print(f"prompt {prompt[0].tolist()}")
  greedy8, greedy1 = steps_for(decoding_graph(config, batch=1))
  greedy_decode(greedy8, prompt, 1)  # traces (lowers) the step once
  tokens, secs = _timed(lambda: greedy_decode(greedy8, prompt, n))
  same = np.array_equal(tokens, greedy_decode(greedy1, prompt, n))
  follows = np.mean(tokens[0, 1:] == perm[tokens[0, :-1]])
  print(f"greedy       {tokens[0].tolist()}  same on 1 device: {same}; "
        f"follows the trained permutation: {follows:.0%}")
  positions = tokens.shape[1] - 1
  print(f"  {1e3 * secs / positions:.2f} ms per token on 8 devices "
        f"({positions} step calls, lowered {greedy8.traces} time)")
  sample8, sample1 = steps_for(decoding_graph(
      config, batch=1, mode="sample", temperature=0.8, top_k=5))
  tokens = sample_decode(sample8, prompt, n, seed=args.seed)
  same = np.array_equal(tokens, sample_decode(sample1, prompt, n,
                                              seed=args.seed))
  print(f"sample (T=0.8, top-5, seed {args.seed}) {tokens[0].tolist()}  "
        f"same on 1 device: {same}")
  beam8, beam1 = steps_for(decoding_graph(config, batch=4, mode="beam",
                                          beam_size=4))
  hyps, scores = beam_search(beam8, prompt, n)
  same = np.array_equal(hyps, beam_search(beam1, prompt, n)[0])
  print(f"beam (4)     {hyps[0, 0].tolist()}  log p {scores[0, 0]:.3f}  "
        f"same on 1 device: {same}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
