"""mesh-tf: Mesh TensorFlow reimplemented, with an automatic layout optimizer.

``import mesh_tf as mtf`` gives the public API.  Importing it does not import
TensorFlow; only lowering onto real devices does.  It imports CP-SAT first
(:mod:`mesh_tf.startup.import_order`) and asks TF for its BFC host allocator unless
the environment chose (:mod:`mesh_tf.startup.host_allocator`).
"""

# CP-SAT before TensorFlow (see mesh_tf.startup.import_order): importing mesh_tf
# first makes every later order safe.
from mesh_tf.startup import import_order as _import_order

_import_order.import_cp_sat_first()

# TF's BFC host allocator unless the user chose (see mesh_tf.startup.host_allocator).
from mesh_tf.startup import host_allocator as _host_allocator

_host_allocator.request_bfc()

from mesh_tf.core import *  # noqa: F401,F403  pylint: disable=wildcard-import
from mesh_tf.core.dims import Dimension, Shape, convert_to_dimension, convert_to_shape
from mesh_tf.core.dtypes import VariableDType, as_dtype
from mesh_tf.core.layout import LayoutRules, TensorLayout, convert_to_layout_rules
from mesh_tf.graph import Graph, Mesh, Operation, Tensor
from mesh_tf.lowering import (CollectiveRecord, CollectiveTrace, LaidOutTensor,
                              LazyAllreduceSum, MeshImpl,
                              OpLowering, PlacementMeshImpl, ShapeMeshImpl,
                              logical_cpu_devices, lower, lower_operation,
                              set_logical_cpu_devices, step_call_options)
from mesh_tf.ops.control import depend, stop_gradient
from mesh_tf.ops.creation import (constant, import_fully_replicated,
                                  import_tf_tensor, mtf_range, ones, ones_like,
                                  zeros, zeros_like)
from mesh_tf.ops.creation import range  # pylint: disable=redefined-builtin
from mesh_tf.ops.einsum import einsum, matmul
from mesh_tf.ops.elementwise import (abs, add, add_n, cast, cos, divide, elu,
                                     equal, exp, floordiv, gelu, greater,
                                     greater_equal, identity, leaky_relu, less,
                                     less_equal, log, logical_and, logical_not,
                                     logical_or, maximum, minimum, mod,
                                     multiply, negative, not_equal, pow,
                                     reciprocal, relu, rsqrt, selu, sigmoid,
                                     sign, sin, softplus, sqrt, square,
                                     subtract, swish, tanh, to_bfloat16,
                                     to_float, to_int32, where)
from mesh_tf.ops.reduce import (log_softmax, reduce_all, reduce_any,
                                reduce_logsumexp, reduce_max, reduce_mean,
                                reduce_min, reduce_sum, softmax)
from mesh_tf.ops.variables import (Variable, apply_gradient_descent, assign,
                                   assign_add, assign_sub,
                                   combine_assignments, constant_initializer,
                                   get_variable, ones_initializer,
                                   random_normal_initializer,
                                   truncated_normal_initializer,
                                   random_uniform_initializer, read,
                                   zeros_initializer)
from mesh_tf.ops.variable_extras import *  # noqa: F401,F403
from mesh_tf.ops.variables import (assign_add_slice,
                                   assign_slice, assign_sub_slice)
from mesh_tf.compat.lowering import Lowering  # noqa: E402  (autostack=)
from mesh_tf.compat.op_classes import *  # noqa: F401,F403,E402
from mesh_tf.compat.functions import *  # noqa: F401,F403,E402
from mesh_tf.compat.laid_out_ops import *  # noqa: F401,F403,E402
from mesh_tf.ops.einsum import EinsumOperation  # noqa: E402
from mesh_tf.ops.reduce import ReduceOperation  # noqa: E402
from mesh_tf.ops.creation import (ConstantOperation, ImportOperation,  # noqa: E402
                                  RangeOperation)
from mesh_tf.ops.control import DependOperation, StopGradientOperation  # noqa: E402
from mesh_tf.ops.variables import AssignOperation  # noqa: E402
from mesh_tf.gradients import CustomGradientOperation  # noqa: E402

# Op families whose modules list their public names in __all__.
from mesh_tf.ops.reshape import *  # noqa: F401,F403
from mesh_tf.ops.slicing import *  # noqa: F401,F403
from mesh_tf.ops.shift import *  # noqa: F401,F403
from mesh_tf.ops.gather import *  # noqa: F401,F403
from mesh_tf.ops.topk import *  # noqa: F401,F403
from mesh_tf.ops.random import *  # noqa: F401,F403
from mesh_tf.ops.conv import *  # noqa: F401,F403
from mesh_tf.ops.pool import *  # noqa: F401,F403

from mesh_tf import layers  # noqa: E402  (mtf.layers.dense, ...)
# Mesh TF's module paths (mtf.placement_mesh_impl, mtf.beam_search, ...).
from mesh_tf.compat import (beam_search, placement_mesh_impl,  # noqa: E402,F401
                            test_utils, utils)
from mesh_tf import auto_mtf, checkpoint, training  # noqa: E402,F401

# Autodiff and optimizers.  ``mtf.gradients`` is the function; import the
# module's other names with ``from mesh_tf.gradients import ...``.
from mesh_tf.gradients import (custom_gradient, gradients,  # noqa: E402
                               recompute_grad, register_gradient)
from mesh_tf.training import optimize  # noqa: E402  (mtf.optimize.SgdOptimizer, ...)

# The layout optimizer (OR-Tools is imported only when these are called).
from mesh_tf.auto_mtf.door import auto_layout, auto_mesh_and_layout, load_plan  # noqa: E402

# Mesh TF's loops, conv op classes and step helpers (issue 16, h2).
from mesh_tf.ops.while_loop import *  # noqa: F401,F403,E402
from mesh_tf.ops.conv_backprop import *  # noqa: F401,F403,E402
from mesh_tf.compat.dynamic_shift import *  # noqa: F401,F403,E402
from mesh_tf.compat.serialize import *  # noqa: F401,F403,E402
from mesh_tf.ops.generic_grad import *  # noqa: F401,F403,E402
from mesh_tf.ops.stacked_variables import *  # noqa: F401,F403,E402
# Issue 16, h6-compat-misc: Mesh TF's TPU tiling path (mtf.simd_mesh_impl),
# and MeshImpl(shape, layout) as geometry with its backend contract.
from mesh_tf.compat import simd_mesh_impl  # noqa: E402,F401
from mesh_tf.lowering.backend import MeshBackend  # noqa: E402,F401
from mesh_tf.lowering.mesh_impl import BackendRequiredError  # noqa: E402,F401

float32, float16, bfloat16, int32, int64 = ("float32", "float16", "bfloat16",
                                            "int32", "int64")
bool = "bool"  # pylint: disable=redefined-builtin

__version__ = "0.1.0"

# Names whose modules import TensorFlow, loaded on first use so that
# ``import mesh_tf`` stays TF-free.
_LAZY = {"MtfRestoreHook": "mesh_tf.lowering.hooks",
         "MtfCheckpointSaverListener": "mesh_tf.lowering.hooks"}


def __getattr__(name):
  module = _LAZY.get(name)
  if module is None:
    raise AttributeError(f"module 'mesh_tf' has no attribute {name!r}")
  import importlib  # pylint: disable=g-import-not-at-top
  return getattr(importlib.import_module(module), name)
