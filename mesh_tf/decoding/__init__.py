"""Incremental decoding of the zoo Transformer LM on a mesh.

* :mod:`mesh_tf.models.decoding` builds the one-token step graph (pure
  Python; the cost model and ``mtf.auto_layout`` take it as it is).
* :class:`DecodeStep` lowers it once on real devices and keeps the weights
  and the key/value caches there.
* :func:`greedy_decode`, :func:`sample_decode` and :func:`beam_search` run it
  token by token.

Example:
  >>> from mesh_tf.models import TransformerConfig              # doctest: +SKIP
  >>> d = decoding_graph(TransformerConfig(), batch=1)
  >>> step = DecodeStep(d, "model:8", "heads:model;d_ff:model;vocab:model",
  ...                   mtf.logical_cpu_devices(8))
  >>> greedy_decode(step, [[1, 2, 3]], num_steps=4)
"""

from mesh_tf.models.decoding import (DecodingError, DecodingGraph,
                                     decoding_graph, decoding_model)
from mesh_tf.decoding.step import DecodeStep
from mesh_tf.decoding.search import (beam_search, decode, greedy_decode,
                                     gumbel_noise, sample_decode)

__all__ = ["DecodingError", "DecodingGraph", "decoding_graph",
           "decoding_model", "DecodeStep", "beam_search", "decode",
           "greedy_decode", "gumbel_noise", "sample_decode"]
