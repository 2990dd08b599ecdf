"""A mixture-of-experts Transformer LM: the Transformer LM of
:mod:`mesh_tf.models.transformer` whose FFN is a top-2 MoE layer every
``moe_every`` layers.

Extra dims: ``experts`` (expert side, map it to the batch axis for expert
parallelism: ``batch:rows;experts:rows``), ``gate_experts`` (the gate's
expert index, token side), ``expert_batch`` (the batch as the experts
receive it, expert side) and ``expert_capacity``.
"""

import dataclasses

from mesh_tf.core.dims import Dimension
from mesh_tf.models.transformer import TransformerConfig, transformer_lm


@dataclasses.dataclass(frozen=True)
class MoETransformerConfig(TransformerConfig):
  """:class:`TransformerConfig` plus the experts."""
  experts: int = 4
  moe_every: int = 2
  capacity_factor: float = 2.0
  moe_loss_coef: float = 1e-2

  def is_moe_layer(self, i):
    return self.moe_every > 0 and i % self.moe_every == self.moe_every - 1

  def num_parameters(self):
    n_moe = sum(self.is_moe_layer(i) for i in range(self.layers))
    dense = super().num_parameters()
    ffn = 2 * self.d_model * self.d_ff
    return dense + n_moe * (self.experts * ffn - ffn
                            + self.d_model * self.experts)

  def build(self, mesh_name="mesh"):
    return moe_transformer_lm(**dataclasses.asdict(self), mesh_name=mesh_name)


def moe_transformer_lm(experts=4, moe_every=2, capacity_factor=2.0,
                       moe_loss_coef=1e-2, mesh_name="mesh", **lm_kwargs):
  """Builds a MoE Transformer LM graph.

  Layers ``i`` with ``i % moe_every == moe_every - 1`` use a top-2 MoE FFN of
  ``experts`` experts (each ``d_model -> d_ff -> d_model``); the others a
  dense FFN.  The loss adds the MoE load-balancing losses (also in
  ``outputs["aux_loss"]``; the LM loss alone is ``outputs["lm_loss"]``).

  Args:
    experts, moe_every, capacity_factor, moe_loss_coef: the MoE options.
    **lm_kwargs: the sizes of :func:`~mesh_tf.models.transformer.transformer_lm`.

  Returns:
    :class:`~mesh_tf.models.base.ModelGraph`.
  """
  from mesh_tf import layers as L
  config = MoETransformerConfig(experts=experts, moe_every=moe_every,
                                capacity_factor=capacity_factor,
                                moe_loss_coef=moe_loss_coef, **lm_kwargs)
  e = Dimension("experts", experts)
  f = Dimension("d_ff", config.d_ff)

  def ffn(i, x):
    if config.is_moe_layer(i):
      return L.moe(x, f, e, capacity_factor=capacity_factor,
                   activation=config.activation, loss_coef=moe_loss_coef,
                   name=f"layer_{i}/moe")
    return L.dense_relu_dense(x, f, dropout_rate=config.dropout,
                              activation=config.activation,
                              name=f"layer_{i}/ffn"), None
  model = transformer_lm(mesh_name=mesh_name, ffn_fn=ffn, **lm_kwargs)
  return dataclasses.replace(model, config=config)
