"""Master variables: one full-shape TF variable per mtf variable, as Mesh
TensorFlow keeps them for checkpoints in ``tf.compat.v1`` graph programs.

The slices that a step reads and updates live on the mesh's devices (see
:class:`~mesh_tf.lowering.mesh_impl.LaidOutVariable`).  A graph-mode program
saves and restores with ``tf.train.Saver(tf.global_variables())``, keyed by
variable name, so it needs each variable whole under its own name, whatever
the layout: the *master*.  ``copy_masters_to_slices`` fills the slices from
the masters (after a restore); ``copy_slices_to_masters`` writes the
slices back (before a save).

When are they made:

* ``Lowering(graph, {mesh: impl})`` in a ``tf.compat.v1`` graph makes them
  before it returns, as Mesh TF did: a ``global_variables_initializer()``
  built after lowering covers them, then ``copy_masters_to_slices()`` fills
  the slices (Mesh TF's order).  Once they exist, the slices leave
  ``GLOBAL_VARIABLES``/``TRAINABLE_VARIABLES`` for ``LOCAL_VARIABLES``: a
  Saver then writes layout-free values only, and restoring under another
  mesh or layout works.  ``local_variables_initializer()`` also initializes
  the slices (from the variables' initializers: the masters' values).
* Eagerly, on the first request (:func:`make_masters`): the masters are
  eager variables and the copies run at once (``copy_masters_to_slices()``
  returns None, as ``tf.group`` does eagerly).
* Never for ``mtf.lower`` (``TrainStep``, ``tf.function`` programs,
  ``mesh_tf.checkpoint``): those keep one copy of each variable, and a
  request for masters inside a ``tf.function`` is an error.
"""

from mesh_tf.core.errors import MtfError
from mesh_tf.lowering.lazy_tf import tf

__all__ = ["MasterVariables", "make_masters", "make_masters_in_v1_graph"]

_MASTER_DEVICE = "/device:CPU:0"


class MasterVariables:
  """The masters of one lowering, and the ops that copy them.

  Args:
    lowering: a :class:`~mesh_tf.lowering.Lowering` built in a
      ``tf.compat.v1`` graph (not eagerly, not inside ``tf.function``).

  Attributes:
    masters: dict from mtf Variable to its full-shape TF variable, named
      like the mtf variable (so ``tf.train.Saver`` keys it by that name).
  """

  def __init__(self, lowering):
    if _in_function():
      raise MtfError(
          "master variables belong to tf.compat.v1 graph and eager programs, "
          "not to a tf.function; use mesh_tf.checkpoint / TrainStep.save")
    self.lowering = lowering
    self.eager = tf.executing_eagerly()
    self.masters = {}
    for var, laid in lowering.variables.items():
      full = tuple(var.shape.to_integer_list())
      if getattr(var, "master", None) is not None:  # made by a variable placer
        self.masters[var] = var.master
        if not self.eager:
          _make_local(tf.compat.v1.get_default_graph(), laid.slices or [])
        continue

      def initial_value(var=var, full=full):
        return var.initializer(full, (0,) * len(full), full, var.dtype,
                               var.seed)
      if self.eager:
        with tf.device(_MASTER_DEVICE):
          self.masters[var] = tf.Variable(
              initial_value, name=var.name, trainable=var.trainable,
              dtype=var.dtype)
        continue
      graph = tf.compat.v1.get_default_graph()
      keys = tf.compat.v1.GraphKeys
      collections = [keys.GLOBAL_VARIABLES]
      if var.trainable:
        collections.append(keys.TRAINABLE_VARIABLES)
      with graph.name_scope(None), tf.device(_MASTER_DEVICE):
        self.masters[var] = tf.compat.v1.Variable(
            initial_value, name=var.name, trainable=var.trainable,
            collections=collections, dtype=var.dtype, use_resource=True)
      _make_local(graph, laid.slices or [])

  def copy_masters_to_slices(self):
    """One TF op that assigns every slice its part of its master."""
    ops = []
    for var, laid in self.lowering.variables.items():
      impl = self.lowering.mesh_impl(var)
      master = self.masters[var]
      parts = {}
      for p, s in enumerate(laid.slices):
        begin = impl.slice_begin(var.shape, p)
        if begin not in parts:  # replicas share one cut of the master
          with tf.device(_MASTER_DEVICE):
            value = master.read_value()
            if tuple(laid.slice_shape) != tuple(var.shape.to_integer_list()):
              value = tf.slice(value, begin, laid.slice_shape)
            parts[begin] = value
        with tf.device(s.device):
          ops.append(s.assign(parts[begin], read_value=False))
    return tf.group(ops, name="copy_masters_to_slices")

  def copy_slices_to_masters(self):
    """One TF op that assigns every master the value of its slices."""
    ops = []
    for var, laid in self.lowering.variables.items():
      impl = self.lowering.mesh_impl(var)
      full = impl.export_to_tf_tensor(laid.value(), var.shape)
      with tf.device(_MASTER_DEVICE):
        ops.append(self.masters[var].assign(full, read_value=False))
    return tf.group(ops, name="copy_slices_to_masters")


def _in_function():
  graph = tf.compat.v1.get_default_graph()
  return getattr(graph, "building_function", False)


def _make_local(graph, slices):
  keys = tf.compat.v1.GraphKeys
  for key in (keys.GLOBAL_VARIABLES, keys.TRAINABLE_VARIABLES):
    ref = graph.get_collection_ref(key)
    ref[:] = [v for v in ref if not any(v is s for s in slices)]
  local = graph.get_collection_ref(keys.LOCAL_VARIABLES)
  for s in slices:
    if not any(v is s for v in local):
      local.append(s)


def make_masters_in_v1_graph(lowering):
  """Makes ``lowering``'s masters now if it runs in a ``tf.compat.v1``
  graph on TF variables (not eagerly, not inside a ``tf.function``)."""
  if not any(laid.slices for laid in lowering.variables.values()):
    return None
  if tf.executing_eagerly() or _in_function():
    return None
  return make_masters(lowering)


def make_masters(lowering):
  """The :class:`MasterVariables` of ``lowering``, made on first call."""
  masters = getattr(lowering, "_masters", None)
  if masters is None:
    masters = MasterVariables(lowering)
    lowering._masters = masters  # pylint: disable=protected-access
  return masters
