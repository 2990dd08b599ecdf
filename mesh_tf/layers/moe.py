"""A mixture-of-experts feed-forward layer with top-2 gating.

Each batch element is a group of ``length`` tokens.  A gate picks the two
best experts of each token; tokens are placed in per-expert buffers of
``capacity`` slots (overflowing tokens are dropped, as in GShard/Mesh TF).

Named dims make expert parallelism a layout choice:

* the token side holds ``[batch, length, gate_<experts>, capacity]``
  dispatch/combine tensors: ``gate_<experts>`` is the gate's expert index;
* the expert side holds ``[expert_<batch>, experts, capacity, d_model]``:
  ``expert_<batch>`` is the batch as the experts receive it.

Both are dims of their own (not ``batch`` and ``experts`` again) so that a
layout may split ``experts`` over the axis that splits ``batch`` (expert
parallelism) and still keep the expert side's batch over another axis; their
names say their role, since they appear in layout rules (e.g.
``batch:node;expert_batch:node;experts:gpu`` on a cluster of nodes).

Moving between the two is one ``mtf.reshape`` that renames both dims.  Under
a layout such as ``batch:x;experts:x`` it moves the split from ``batch`` to
``experts`` over the same mesh axis, which lowers to one all-to-all each
way, and each processor runs only its own experts.
"""

import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import ShapeError
from mesh_tf.layers.core import (_maybe_cast, _unique_scope, get_activation,
                                 one_hot)
from mesh_tf.ops.reduce import softmax
from mesh_tf.ops import einsum as einsum_lib
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import reduce as reduce_lib
from mesh_tf.ops import variables as var_lib


def expert_capacity(length, num_experts, capacity_factor):
  """Slots per expert and group: ``ceil(capacity_factor * length / E)``,
  at least 1 and at most ``length``."""
  return max(1, min(length, math.ceil(capacity_factor * length
                                      / num_experts)))


def _top_1(x, dim):
  """(index, value) of the largest entry along ``dim``."""
  from mesh_tf.ops.topk import top_1
  values, indices = top_1(x, dim)
  return indices, values


def _cumsum_exclusive(x, dim):
  from mesh_tf.ops.topk import cumsum
  return cumsum(x, dim, exclusive=True)


def top2_gating(gate_logits, experts_dim, length_dim, capacity_dim,
                loss_coef=1e-2):
  """Top-2 gating: the combine tensor and the load-balancing loss.

  Args:
    gate_logits: ``[batch, length, gate_experts]`` router logits.
    experts_dim: the token-side experts Dimension (of ``gate_logits``).
    length_dim: the group dim (tokens compete for capacity along it).
    capacity_dim: the Dimension of per-expert slots.

  Returns:
    ``(combine, loss)``: combine ``[batch, length, gate_experts,
    capacity]`` holds each kept token's normalised gate at its (expert,
    slot); loss is the scalar auxiliary load-balancing loss
    ``loss_coef * E^2 * mean(fraction_routed * mean_gate)``.
  """
  e = experts_dim
  gates = softmax(ew.to_float(gate_logits), e)
  group = gate_logits.shape - [e]
  index1, gate1 = _top_1(gates, e)
  mask1 = one_hot(index1, e, dtype="float32")
  per_group = gates.shape - [length_dim]
  density = reduce_lib.reduce_mean(mask1, output_shape=per_group)
  density_proxy = reduce_lib.reduce_mean(gates, output_shape=per_group)
  loss = reduce_lib.reduce_mean(density * density_proxy) * float(
      e.size * e.size * loss_coef)
  index2, gate2 = _top_1(gates * (1.0 - mask1), e)
  mask2 = one_hot(index2, e, dtype="float32")
  denom = gate1 + gate2 + 1e-9
  gate1, gate2 = gate1 / denom, gate2 / denom
  cap = float(capacity_dim.size)
  # Slot of each token in its first expert; tokens past capacity drop.
  pos1 = _cumsum_exclusive(mask1, length_dim) * mask1
  mask1 = mask1 * ew.to_float(ew.less(pos1, cap))
  count1 = reduce_lib.reduce_sum(mask1, output_shape=per_group)
  pos2 = (_cumsum_exclusive(mask2, length_dim) + count1) * mask2
  mask2 = mask2 * ew.to_float(ew.less(pos2, cap))
  slot1 = ew.to_int32(reduce_lib.reduce_sum(pos1 * mask1, output_shape=group))
  slot2 = ew.to_int32(reduce_lib.reduce_sum(pos2 * mask2, output_shape=group))
  # A dropped token has an all-zero mask row, so its slot does not matter.
  combine = (gate1 * mask1 * one_hot(slot1, capacity_dim)
             + gate2 * mask2 * one_hot(slot2, capacity_dim))
  return combine, loss


def moe(x, hidden_dim, experts_dim, capacity_factor=2.0, activation="relu",
        loss_coef=1e-2, master_dtype="float32", name=None):
  """A top-2 mixture-of-experts feed-forward layer.

  Args:
    x: ``[batch, length, d_model]``.
    hidden_dim: each expert's hidden Dimension (e.g. ``d_ff``).
    experts_dim: the experts Dimension; map it to the mesh axis of
      ``batch`` (``batch:x;experts:x``) for expert parallelism with
      all-to-all dispatch.
    capacity_factor: slots per expert = ``ceil(factor * length / E)``.
    activation: the experts' hidden activation.
    loss_coef: weight of the load-balancing loss.
    name: scope of the variables ``name/gate``, ``name/wi``, ``name/wo``.

  Returns:
    ``(y, aux_loss)``: y has the shape of ``x``; aux_loss is a scalar to add
    to the training loss.

  Raises:
    ShapeError: if ``x`` is not ``[batch, length, d_model]``.
  """
  if x.shape.ndims != 3:
    raise ShapeError(f"moe: input {x.name} {x.shape!r} must be [batch, "
                     "length, d_model]")
  batch, length, d_model = x.shape.dims
  experts_dim = dims_lib.convert_to_dimension(experts_dim)
  hidden_dim = dims_lib.convert_to_dimension(hidden_dim)
  scope = _unique_scope(x.graph, name or "moe")
  e_tok = dims_lib.Dimension("gate_" + experts_dim.name, experts_dim.size)
  b_exp = dims_lib.Dimension("expert_" + batch.name, batch.size)
  capacity = dims_lib.Dimension(
      "expert_capacity",
      expert_capacity(length.size, experts_dim.size, capacity_factor))
  wg = var_lib.get_variable(
      x.mesh, f"{scope}/gate", dims_lib.Shape([d_model, e_tok]),
      master_dtype,
      var_lib.random_normal_initializer(stddev=1.0 / math.sqrt(d_model.size)))
  gate_logits = einsum_lib.einsum([x, _maybe_cast(wg, x.dtype)],
                                  reduced_dims=[d_model],
                                  name=f"{scope}/gate_logits")
  combine, loss = top2_gating(gate_logits, e_tok, length, capacity,
                              loss_coef)
  combine = _maybe_cast(combine, x.dtype)
  dispatch = ew.cast(ew.not_equal(combine, 0.0), x.dtype)
  token_side = dims_lib.Shape([batch, e_tok, capacity, d_model])
  expert_side = dims_lib.Shape([b_exp, experts_dim, capacity, d_model])
  from mesh_tf.ops.reshape import reshape
  expert_in = einsum_lib.einsum([x, dispatch], output_shape=token_side,
                                name=f"{scope}/dispatch")
  expert_in = reshape(expert_in, expert_side)
  wi = var_lib.get_variable(
      x.mesh, f"{scope}/wi", dims_lib.Shape([experts_dim, d_model,
                                             hidden_dim]),
      master_dtype,
      var_lib.random_normal_initializer(stddev=1.0 / math.sqrt(d_model.size)))
  wo = var_lib.get_variable(
      x.mesh, f"{scope}/wo", dims_lib.Shape([experts_dim, hidden_dim,
                                             d_model]),
      master_dtype,
      var_lib.random_normal_initializer(
          stddev=1.0 / math.sqrt(hidden_dim.size)))
  h = einsum_lib.einsum([expert_in, _maybe_cast(wi, x.dtype)],
                        reduced_dims=[d_model], name=f"{scope}/wi_proj")
  act = get_activation(activation)
  if act is not None:
    h = act(h)
  expert_out = einsum_lib.einsum([h, _maybe_cast(wo, x.dtype)],
                                 output_shape=expert_side,
                                 name=f"{scope}/wo_proj")
  expert_out = reshape(expert_out, token_side)
  y = einsum_lib.einsum([expert_out, combine], output_shape=x.shape,
                        name=f"{scope}/combine")
  return y, loss
