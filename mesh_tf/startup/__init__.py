"""What ``import mesh_tf`` does to the process, before anything else runs.

* :mod:`~mesh_tf.startup.import_order`: OR-Tools' CP-SAT is loaded before
  TensorFlow.
* :mod:`~mesh_tf.startup.host_allocator`: TensorFlow's BFC host allocator is
  asked for unless the environment chose.

Both are pure Python and import nothing else of the project.
"""
