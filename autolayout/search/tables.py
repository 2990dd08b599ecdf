"""Per-op cost tables: what each op costs under each local assignment.

An op's trace records depend only on the layout of the dims it touches, with
one exception, the lazy SUM all-reduce: an op that sums over a split dim
(einsum, reduce_sum, ...) leaves its output *pending*, and the all-reduce is
recorded when (and only if) a later op forces it; an ``add`` of two pending
sums over the same mesh axes stays pending and all-reduces once.

To price this exactly the tables are built from *factors*, each a function of
the local assignment of a small scope of dims:

* **op factor** of op ``O``: the compute and the collectives ``O`` records
  itself (``source_op == O``), given its inputs' pending states.  Its scope
  ``E(O)`` is the dims of ``O`` plus the dims that decide whether its inputs
  are pending (``D(t)`` of each input ``t`` that may be pending).
* **all-reduce factor** of a tensor ``t`` that may be pending: the price of
  ``t``'s all-reduce if ``t`` is pending and some consumer (or the export of
  an output) forces it.  Its scope is ``D(t)``, plus the scopes of the
  consumers that force ``t`` only under some assignments (the ``add`` that
  merges two pending sums).

Every factor is computed by running the op's own lowering code on a
:class:`~mesh_tf.ShapeMeshImpl` (no TensorFlow) with the layout rules of the
local assignment and stand-in inputs in the right pending state, so the
tables agree with :func:`costmodels.evaluate` by construction.  Ops with
equal signatures (repeated layers) share one table: the work grows with the
number of distinct ops, not with depth.

An op factor's scope is then narrowed to the dims its cost depends on,
decided exactly from its table, where that makes the program smaller (see
:meth:`GraphTables._narrowed`): how a graph is written (an embedding by
one-hot einsum, whose pending sum runs down the residual stream) should not
decide how large the program is.
"""

import time
from typing import Dict, FrozenSet, NamedTuple, Optional, Tuple

from mesh_tf.core.errors import MtfError
from mesh_tf.core.layout import LayoutRules
from mesh_tf.lowering.laid_out import (LaidOutTensor, LazyAllreduceSum,
                                       PendingInput)
from mesh_tf.lowering.lowering import lower_operation
from mesh_tf.lowering.shape_impl import ShapeMeshImpl
from mesh_tf.ops.storage import StorageGatherOperation, StorageScatterOperation
from autolayout.search import assignments
from autolayout.search.deferred import (deferred_cast,
                                         pending_allreduce_record)
from autolayout.errors import TimeLimitError
from autolayout.search.view import op_signature

# A pending state: (mesh-axis indices of the pending all-reduce, bytes of
# each device's partial sum), or None for an ordinary (materialised) tensor.
PendingState = Optional[Tuple[Tuple[int, ...], int]]


class Outcome(NamedTuple):
  """One op lowered under one local assignment and input states."""
  valid: bool
  compute_s: float
  comm_s: float
  out_states: Tuple[PendingState, ...]
  forced: FrozenSet[int]  # positions of inputs whose pending sum it forced
  error: str = ""
  # ((axis, seconds), ...) of comm_s, for ops whose collectives overlap
  # (storage gathers and scatters; see autolayout.search.overlap_terms).
  comm_by_axis: Tuple[Tuple[str, float], ...] = ()
  # Of comm_by_axis, the barrier's part (a gradient sync's is hidden).
  wait_by_axis: Tuple[Tuple[str, float], ...] = ()


class Factor(NamedTuple):
  """A term of the objective: ``count`` times a table over ``scope``."""
  kind: str          # "op" or "allreduce"
  key: int           # interned structural key; equal keys share the table
  scope: Tuple[str, ...]
  count: int
  example: str       # an op or tensor name it stands for


def _overlaps(op):
  """Whether ``op``'s own collectives can overlap compute (so its table
  needs them by mesh axis)."""
  return isinstance(op, (StorageGatherOperation, StorageScatterOperation))


def lower_op(op, mesh_shape, rules, input_states, pricer):
  """Lowers ``op`` alone under ``rules`` with inputs in ``input_states``.

  Runs :func:`mesh_tf.lowering.lower_operation` on a
  :class:`~mesh_tf.ShapeMeshImpl`, with value-less inputs in the given
  pending states.  Returns an :class:`Outcome`; ``valid`` is False (with
  the error message) if the op's lowering rejects the layout.
  """
  impl = ShapeMeshImpl(mesh_shape, rules)
  pending = {}   # input position -> its PendingInput stand-in
  try:
    inputs = []
    for i, (t, st) in enumerate(zip(op.inputs, input_states)):
      if st is None:
        inputs.append(None)  # a stand-in of the tensor's slice shape
        continue
      pending[i] = PendingInput(
          impl, LaidOutTensor(impl.slice_shape(t), t.dtype), st[0],
          deferred_cast(impl, t, st))
      inputs.append(pending[i])
    lowered = lower_operation(op, impl, inputs)
  except MtfError as e:
    return Outcome(False, 0.0, 0.0, (), frozenset(), str(e))
  # The all-reduces the op forced on its pending inputs are priced by
  # those inputs' all-reduce factors, not here.
  forced = {i for i, p in pending.items() if p.forced}
  comm = 0.0
  by_axis = {} if _overlaps(op) else None
  waits = {}
  for rec in lowered.trace.collectives:
    comm += pricer.collective_s(rec)
    if by_axis is not None:
      for a, t in pricer.collective_by_axis(rec).items():
        by_axis[a] = by_axis.get(a, 0.0) + t
      for a, t in pricer.collective_wait_by_axis(rec).items():
        waits[a] = waits.get(a, 0.0) + t
  compute = sum(pricer.compute_s(rec) for rec in lowered.trace.compute)
  outs = []
  for v in lowered.outputs:
    if isinstance(v, LazyAllreduceSum) and v.pending:
      # A deferred cast reduces in the narrow dtype (what runs before it).
      laid = (v.laid_out_input if v.then is None
              else v.then.before(v.laid_out_input))
      outs.append((tuple(v.mesh_axes), laid.slice_bytes))
    else:
      outs.append(None)
  return Outcome(True, compute, comm, tuple(outs), frozenset(forced),
                 comm_by_axis=tuple(sorted((by_axis or {}).items())),
                 wait_by_axis=tuple(sorted(waits.items())))


def _maximal(scopes):
  """The scopes (tuples of dim names) not inside another, sorted."""
  out = []
  for s in sorted(set(scopes), key=lambda s: (-len(s), s)):
    if not any(set(s) <= set(m) for m in out):
      out.append(s)
  return sorted(out)


class GraphTables:
  """The factors of a graph on one mesh, and their values.

  Args:
    graph: the mtf Graph (one mesh).
    mesh_shape: the mesh Shape.
    outputs: tensors whose values are exported (their pending sums forced).
    pricer: prices trace records (see :mod:`autolayout.search.pricing`).
    space: the :class:`~autolayout.search.assignments.DimSpace`.
    microbatches: a :class:`mesh_tf.training.microbatch.MicrobatchPlan`, or None:
      a factor's count is then the sum of its ops' repeats per step (an
      all-reduce repeats with the op that left the sum pending, or with
      the ops that force it where they run less often), as
      :func:`costmodels.evaluate` prices them.
    outcomes: a dict the caller owns, shared by the tables of several
      graphs on the same mesh and pricer (e.g. the training candidates of
      one model): each op lowered under one local assignment and input
      states is priced once for all of them (keyed by the op's signature,
      which is all its lowering reads).  None: this graph's own.
    signatures: a dict ``{op: op_signature(op)}`` the caller owns for this
      graph, shared by its tables on every mesh (None: computed here).
    narrow: narrow op factors to their cost scopes where that makes the
      program smaller (:meth:`_narrowed`); False: every op factor keeps the
      dims of its inputs' pending states.
    structure: a dict the caller owns, shared by the tables of several
      graphs on the same mesh, pricer and dim-axis space (the options and
      conflicts :func:`assignments.local_assignments` reads): the keys,
      scopes and tables of ops, which depend only on an op's signature and
      its inputs' producers' (recursively), are built once for all of
      them.  None: this graph's own.

  Attributes:
    factors: list of :class:`Factor`, in a deterministic order.
  """

  def __init__(self, graph, mesh_shape, outputs, pricer, space,
               microbatches=None, deadline=None, outcomes=None,
               *, signatures=None, narrow=True, structure=None):
    self.graph, self.mesh_shape, self.pricer = graph, mesh_shape, pricer
    # The backend that records the all-reduce of a pending sum when forced
    # (pending_allreduce_record): the same recorded method as lowering's.
    self._forcing = ShapeMeshImpl(mesh_shape, LayoutRules([]))
    self._repeats = ((lambda name: 1) if microbatches is None
                     else microbatches.repeats)
    self._deadline = deadline  # time.perf_counter() value, or None
    self._narrow = narrow
    self.space = space
    meshes = {op.mesh for op in graph.operations}
    if len(meshes) > 1:
      raise MtfError(f"the layout search handles one mesh; graph uses "
                     f"{sorted(m.name for m in meshes)}")
    # The keys are structural (an op's signature and its inputs'
    # producers' keys, recursively), so everything keyed by them holds for
    # any graph on this mesh, pricer and space: ``structure`` shares them.
    st = {} if structure is None else structure
    self._intern: Dict[object, int] = st.setdefault("intern", {})
    self._op_cache: Dict[tuple, Outcome] = st.setdefault("op_cache", {})
    self._outcomes: Dict[tuple, Outcome] = ({} if outcomes is None
                                            else outcomes)
    self._key_sig: Dict[int, object] = st.setdefault("key_sig", {})
    self._signatures = {} if signatures is None else signatures
    self._key_scope: Dict[int, Tuple[str, ...]] = st.setdefault(
        "key_scope", {})
    self._key_op: Dict[int, object] = st.setdefault("key_op", {})
    # op key -> per-input (D, key)
    self._key_inputs: Dict[int, tuple] = st.setdefault("key_inputs", {})
    # tensor key -> op, j
    self._producer: Dict[int, Tuple[int, int]] = st.setdefault(
        "producer", {})
    # all-reduce factor key -> info
    self._ar_info: Dict[int, tuple] = st.setdefault("ar_info", {})
    # op key -> (scope its output states depend on, {sigma: out_states} on
    # that scope, or None when it is the op's whole scope)
    self._states: Dict[int, tuple] = st.setdefault("states", {})
    # op key -> factor scope
    self._cost: Dict[int, Tuple[str, ...]] = st.setdefault("cost", {})
    self.may_pend: Dict[object, bool] = {}
    self.tensor_key: Dict[object, Optional[int]] = {}
    self.pend_scope: Dict[object, Tuple[str, ...]] = {}
    self.op_key: Dict[object, int] = {}
    self.ar_key: Dict[object, int] = {}  # pending tensor -> its factor key
    self._build(set(outputs or ()))

  def repeats(self, op_name):
    """How often op ``op_name``'s records run per step (the microbatch
    count for per-microbatch work, else 1): what :attr:`factors` counts
    weigh each op and each pending tensor (by its producer) with."""
    return self._repeats(op_name)

  # --- keys and scopes --------------------------------------------------
  def _key(self, obj):
    k = self._intern.get(obj)
    if k is None:
      k = self._intern[obj] = len(self._intern)
    return k

  @staticmethod
  def _dims(op):
    names = set()
    # A while loop lowers its body and condition: their dims are its own.
    for t in list(op.inputs) + list(op.outputs) + list(
        getattr(op, "inner_tensors", ())):
      names |= set(t.shape.dimension_names)
    return names

  def _build(self, forced_outputs):
    consumers = {}
    op_counts, op_example = {}, {}
    for n, op in enumerate(self.graph.operations):
      if self._deadline is not None and n % 64 == 0 and (
          time.perf_counter() > self._deadline):
        raise TimeLimitError(
            f"the time limit ran out while pricing the ops of the graph "
            f"(at op {n} of {len(self.graph.operations)})")
      for i, t in enumerate(op.inputs):
        consumers.setdefault(t, []).append((op, i))
      ins = tuple(self.tensor_key.get(t) for t in op.inputs)
      sig = self._signatures.get(op)
      if sig is None:
        sig = self._signatures[op] = op_signature(op)
      key = self._key(("op", sig, ins))
      self.op_key[op] = key
      if key not in self._key_scope:
        self._key_sig[key] = sig
        scope = self._dims(op)
        for t in op.inputs:
          scope |= set(self.pend_scope.get(t, ()))
        self._key_op[key] = op
        self._key_inputs[key] = tuple(
            (self.pend_scope.get(t, ()), self.tensor_key.get(t))
            for t in op.inputs)
        self._key_scope[key] = tuple(sorted(scope))
      op_counts[key] = op_counts.get(key, 0) + self._repeats(op.name)
      op_example.setdefault(key, op.name)
      table = self._table(key)
      for j, t in enumerate(op.outputs):
        pend = any(o.valid and o.out_states[j] is not None
                   for o in table.values())
        self.may_pend[t] = pend
        if pend:
          self.tensor_key[t] = self._key(("out", key, j))
          self.pend_scope[t] = self._state_scope(key)[0]
          self._producer.setdefault(self.tensor_key[t], (key, j))
    factors = [Factor("op", k, self._key_scope[k], c, op_example[k])
               for k, c in op_counts.items()]
    ar_counts, ar_example = {}, {}
    self.ar_runs = {}   # pending tensor -> its all-reduces per step
    for t, pend in self.may_pend.items():
      if not pend:
        continue
      conditional = []
      always = t in forced_outputs
      for c, _ in consumers.get(t, []):
        if not always and self._forces_always(c, t):
          always = True
      if not always:
        seen = set()
        for c, _ in consumers.get(t, []):
          pos = c.inputs.index(t)
          if (self.op_key[c], pos) not in seen:
            seen.add((self.op_key[c], pos))
            conditional.append((self.op_key[c], pos))
        if not conditional:
          continue  # never forced: no all-reduce ever happens
      structure = "always" if always else tuple(sorted(conditional))
      akey = self._key(("ar", self.tensor_key[t], structure))
      if akey not in self._ar_info:
        scope = set(self.pend_scope[t])
        if not always:
          for ck, _ in conditional:
            scope |= set(self._key_scope[ck])
        self._ar_info[akey] = (self.tensor_key[t], structure,
                               tuple(sorted(scope)))
      self.ar_key[t] = akey
      # A sum is reduced at most once per run of the op that leaves it,
      # and of the ops that force it (a microbatched step's accumulation
      # forces the microbatches' summed gradient once per step).
      runs = self._repeats(t.operation.name)
      forcing = [self._repeats(c.name) for c, _ in consumers.get(t, [])]
      if forcing and t not in forced_outputs:
        runs = min(runs, max(forcing))
      self.ar_runs[t] = runs
      ar_counts[akey] = ar_counts.get(akey, 0) + runs
      ar_example.setdefault(akey, t.name)
    factors += [Factor("allreduce", k, self._ar_info[k][2], c, ar_example[k])
                for k, c in ar_counts.items()]
    self.factors = self._narrowed(factors)

  # --- op tables --------------------------------------------------------
  def _table(self, key):
    """Outcome of op ``key`` for every local assignment of its scope."""
    cached = self._op_cache.get(("table", key))
    if cached is not None:
      return cached
    scope = self._key_scope[key]
    op = self._key_op[key]
    # Where the op's own dims and each pending input's dims sit in the
    # scope, found once per op, not once per local assignment (the README
    # plan's search prices 2 * 10^5 of them).
    pos = {d: i for i, d in enumerate(scope)}
    dims = tuple(sorted(self._dims(op)))
    picks = (tuple(pos[d] for d in dims),
             tuple(None if tkey is None else
                   (tkey, tuple(pos[d] for d in pscope))
                   for pscope, tkey in self._key_inputs[key]))
    table = {}
    for sigma in assignments.local_assignments(self.space, scope):
      table[sigma] = self._outcome(key, op, dims, picks, sigma)
    self._op_cache[("table", key)] = table
    return table

  def _outcome(self, key, op, dims, picks, sigma):
    own, inputs = picks
    states = tuple(
        None if inp is None else
        self.state(inp[0], tuple(sigma[i] for i in inp[1]))
        for inp in inputs)
    local = tuple(sigma[i] for i in own)
    ck = (self._key_sig[key], local, states)
    out = self._outcomes.get(ck)
    if out is None:
      out = lower_op(op, self.mesh_shape, assignments.to_rules(dims, local),
                     states, self.pricer)
      self._outcomes[ck] = out
    return out

  def _state_scope(self, key):
    """The dims the pending states of op ``key``'s outputs depend on.

    Usually only the op's own dims: an einsum's output is pending over the
    axes of its split reduced dims, whatever its inputs were.  Only ops that
    pass pending sums on (``add`` of two pending sums) depend on their
    inputs' scopes too.  Consumers take this scope instead of the producer's
    whole scope, so scopes do not grow along chains of ops (a residual
    stream that starts as a pending sum would otherwise pull every dim of
    the network into one table).  Decided exactly from the op's table: the
    own dims are used when every valid assignment that agrees on them gives
    the same states.
    """
    hit = self._states.get(key)
    if hit is not None:
      return hit
    scope = self._key_scope[key]
    own = tuple(sorted(self._dims(self._key_op[key])))
    result = (scope, None)
    if own != scope:
      by_own, ok = {}, True
      for sigma, o in self._table(key).items():
        if not o.valid:
          continue
        r = assignments.restrict(scope, sigma, own)
        prev = by_own.setdefault(r, o.out_states)
        if prev != o.out_states:
          ok = False
          break
      if ok:
        result = (own, by_own)
    self._states[key] = result
    return result

  def _narrowed(self, factors):
    """``factors`` with the op factors inside a scope table narrowed to
    their cost scopes (:meth:`_cost_scope`) where that makes the program
    smaller.

    The program has one table per maximal factor scope, with one variable
    per valid local assignment.  For each maximal scope, largest first, the
    op factors inside it take their cost scopes together when the tables
    they then need have fewer assignments in all than before (a layer norm's
    gradient that alone pulls the residual stream's pending dims and the
    MLP's together); otherwise the table stays as it was, since several
    overlapping smaller tables, each tied to the others only dim by dim,
    make CP-SAT's relaxation weaker.  The factors' values are the same
    either way, so the optimum is too.
    """
    if not self._narrow:
      return factors
    counts = {}

    def size(scopes):
      total = 0
      for m in _maximal(scopes):
        if m not in counts:
          counts[m] = len(assignments.local_assignments(self.space, m))
        total += counts[m]
      return total

    scopes = [f.scope for f in factors]
    narrow = [self._cost_scope(f.key) if f.kind == "op" else f.scope
              for f in factors]
    best = size(scopes)
    for m in sorted(_maximal(scopes), key=lambda m: (-counts[m], m)):
      inside = [i for i, sc in enumerate(scopes)
                if narrow[i] != sc and set(sc) <= set(m)]
      if not inside:
        continue
      trial = list(scopes)
      for i in inside:
        trial[i] = narrow[i]
      n = size(trial)
      if n < best:
        scopes, best = trial, n
    return [f._replace(scope=sc) for f, sc in zip(factors, scopes)]

  def _cost_scope(self, key):
    """The dims the cost of op ``key`` depends on: the scope of its factor.

    An op's scope holds the dims that decide its inputs' pending states,
    but most ops cost the same whatever those states are (a pending input's
    all-reduce belongs to the input's own factor).  A layer norm's gradient
    reading the residual stream would otherwise price every dim the stream's
    pending sums ever depended on in one table.  Decided exactly from the
    op's table, as :meth:`_state_scope` is: a dim outside the op's own dims
    is dropped when every pair of valid or invalid assignments that differ
    only in it gives the same validity and prices.
    """
    hit = self._cost.get(key)
    if hit is not None:
      return hit
    scope = self._key_scope[key]
    own = set(self._dims(self._key_op[key]))
    table = self._table(key)
    cost = {sigma: (o.valid, o.compute_s, o.comm_s, o.comm_by_axis,
                    o.wait_by_axis)
            if o.valid else (False,) for sigma, o in table.items()}
    keep = list(scope)
    # The own dims first as a whole (the usual case), then one dim at a time.
    for drop in ([d for d in scope if d not in own],) + tuple(
        [d] for d in scope if d not in own):
      trial = tuple(d for d in keep if d not in drop)
      if len(trial) == len(keep):
        continue
      seen, ok = {}, True
      for sigma, c in cost.items():
        if seen.setdefault(assignments.restrict(scope, sigma, trial),
                           c) != c:
          ok = False
          break
      if ok:
        keep = list(trial)
    result = self._cost[key] = tuple(keep)
    return result

  def _op_outcome(self, factor, sigma):
    """The Outcome of op factor ``factor`` under ``sigma`` of its (cost)
    scope: the op's table at the assignment with its other dims
    replicated, which is valid and prices the same."""
    scope = self._key_scope[factor.key]
    if factor.scope != scope:
      pos = {d: i for i, d in enumerate(factor.scope)}
      sigma = tuple(sigma[pos[d]] if d in pos else None for d in scope)
    return self._table(factor.key)[sigma]

  def state(self, tensor_key, sigma):
    """Pending state of tensors of ``tensor_key`` under the local assignment
    ``sigma`` of their pending scope (None: not pending or invalid)."""
    op_key, j = self._producer[tensor_key]
    _, by_own = self._state_scope(op_key)
    if by_own is not None:
      st = by_own.get(sigma)
      return None if st is None else st[j]
    o = self._table(op_key)[sigma]
    return o.out_states[j] if o.valid else None

  def _forces_always(self, consumer, t):
    """True if ``consumer`` forces ``t`` whenever ``t`` is pending."""
    key = self.op_key[consumer]
    pos = consumer.inputs.index(t)
    hit = self._op_cache.get(("always", key, pos))
    if hit is not None:
      return hit
    result = self._forces_always_uncached(key, pos)
    self._op_cache[("always", key, pos)] = result
    return result

  def _forces_always_uncached(self, key, pos):
    scope = self._key_scope[key]
    pscope, tkey = self._key_inputs[key][pos]
    for sigma, o in self._table(key).items():
      if not o.valid:
        continue
      st = self.state(tkey, assignments.restrict(scope, sigma, pscope))
      if st is not None and pos not in o.forced:
        return False
    return True

  # --- factor values ----------------------------------------------------
  def value(self, factor, sigma):
    """``(valid, compute_s, comm_s)`` of one instance of
    ``factor`` under the local assignment ``sigma`` of its scope."""
    if factor.kind == "op":
      o = self._op_outcome(factor, sigma)
      return o.valid, o.compute_s, o.comm_s
    rec = self.allreduce_record(factor, sigma)
    if rec is None:
      return True, 0.0, 0.0
    return True, 0.0, self.pricer.collective_s(rec)

  def comm_by_axis(self, factor, sigma):
    """``((mesh axis, seconds), ...)`` of one instance's collectives under
    ``sigma`` (op factors of storage gathers and scatters, and all-reduce
    factors; ``()`` for other ops)."""
    if factor.kind == "op":
      return self._op_outcome(factor, sigma).comm_by_axis
    rec = self.allreduce_record(factor, sigma)
    return (() if rec is None else
            tuple(self.pricer.collective_by_axis(rec).items()))

  def wait_by_axis(self, factor, sigma):
    """Of :meth:`comm_by_axis`, the barrier's part (``((mesh axis,
    seconds), ...)``; see ``costmodels.OpCost.wait_by_axis``)."""
    if factor.kind == "op":
      return self._op_outcome(factor, sigma).wait_by_axis
    rec = self.allreduce_record(factor, sigma)
    return (() if rec is None else
            tuple(self.pricer.collective_wait_by_axis(rec).items()))

  def allreduce_record(self, factor, sigma):
    """The CollectiveRecord one instance of the all-reduce ``factor`` makes
    under ``sigma`` (None when its tensor is not pending or not forced).
    Kept with the structure (shared where the caller shares it): the
    scope tables ask for each several times, and every candidate that
    repeats the factor asks again (15k asked in the README plan, 4k of
    them distinct)."""
    key = ("ar_record", factor.key, sigma)
    if key in self._op_cache:
      return self._op_cache[key]
    rec = self._op_cache[key] = self._allreduce_record(factor, sigma)
    return rec

  def _allreduce_record(self, factor, sigma):
    tkey, structure, scope = self._ar_info[factor.key]
    op_key, _ = self._producer[tkey]
    pscope = self._state_scope(op_key)[0]
    st = self.state(tkey, assignments.restrict(scope, sigma, pscope))
    if st is None:
      return None
    if structure != "always":
      forced = False
      for ck, pos in structure:
        o = self._table(ck)[assignments.restrict(scope, sigma,
                                                 self._key_scope[ck])]
        if o.valid and pos in o.forced:
          forced = True
          break
      if not forced:
        return None
    return pending_allreduce_record(self._forcing, st)
