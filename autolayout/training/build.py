"""The training step of a zoo config built for one
:class:`~autolayout.training.families.TrainingDecisions` value (each
family configures the model and rewrites its graph), and
:class:`Candidates`, the caller-owned cache of such steps and their
layout searches."""

from typing import Any, NamedTuple

from autolayout.training.families import FAMILIES, TrainingDecisions

__all__ = ["Candidates", "TrainingGraph", "build_training"]


class TrainingGraph(NamedTuple):
  """A training step built for one :class:`TrainingDecisions`."""
  decisions: TrainingDecisions
  model: Any            # the ModelGraph (built at the microbatch size)
  plan: Any             # mesh_tf.training.microbatch.MicrobatchPlan
  update: Any           # mesh_tf.training.microbatch.MicrobatchedUpdate

  @property
  def graph(self):
    return self.model.graph


def build_training(config, decisions, learning_rate=1e-4):
  """The training step of zoo ``config`` under ``decisions`` (Adam with
  weight decay): each family configures the model, the model is built,
  each family rewrites its graph (:data:`autolayout.training.families.
  FAMILIES`, in order), and the update accumulates the microbatches.

  Raises:
    MtfError: if the batch does not split into the microbatches, or
      ``recompute`` exceeds the layers.
  """
  from mesh_tf.training import optimize
  from mesh_tf.training.microbatch import microbatched_update
  cfg = config
  for family, value in zip(FAMILIES, decisions):
    cfg = family.configure(cfg, value)
  model = cfg.build()
  for family, value in zip(FAMILIES, decisions):
    family.rewrite(model.graph, value)
  update = microbatched_update(
      model.graph, model.loss, model.graph.trainable_variables,
      optimize.AdamWeightDecayOptimizer(learning_rate),
      decisions.microbatches)
  return TrainingGraph(decisions, model, update.plan, update)


class Candidates:
  """The candidate training graphs of one zoo config, built on first use
  and kept for this object's lifetime (the caller owns it): each
  :class:`TrainingDecisions` maps to its :class:`TrainingGraph` and a
  :class:`~autolayout.search.solve.LayoutSearch`, whose tables serve every mesh
  it is asked on.  :meth:`trim` forgets those of another microbatch count
  (their graphs are built at another batch size)."""

  def __init__(self, config, memory_reserve_fraction=None):
    self.config = config
    self.memory_reserve_fraction = memory_reserve_fraction
    self._built = {}
    # Op outcomes per (mesh, topology), shared by every candidate's tables:
    # the candidates repeat most of each other's ops.
    self._outcomes = {}
    # Each product equation's kernel copies, shared by the liveness of
    # every candidate graph.
    self._known_copies = {}

  def get(self, decisions):
    """``(TrainingGraph, LayoutSearch)`` of ``decisions``."""
    from autolayout.search.solve import LayoutSearch
    hit = self._built.get(decisions)
    if hit is None:
      training = build_training(self.config, decisions)
      hit = self._built[decisions] = (training, LayoutSearch(
          training.graph, microbatches=training.plan,
          memory_reserve_fraction=self.memory_reserve_fraction,
          outcomes=self._outcomes, known_copies=self._known_copies))
    return hit

  def trim(self, keep_microbatches, most=24):
    """Forgets the candidates whose k is not ``keep_microbatches`` once more
    than ``most`` graphs are kept (a GPT-3 step graph is tens of MiB)."""
    if len(self._built) > most:
      for d in [d for d in self._built
                if d.microbatches != keep_microbatches]:
        del self._built[d]
