"""Pure-Python value types of the mtf language: dims, shapes, layouts, errors."""

from mesh_tf.core.dims import (Dimension, Shape, convert_to_dimension,
                               convert_to_shape)
from mesh_tf.core.dtypes import as_dtype, size_of
from mesh_tf.core.errors import (DimMappedTwiceError, DTypeError, FeedError,
                                 IndivisibleDimError, InvalidArgumentError,
                                 LayoutError,
                                 MeshAxisReuseError, MeshSizeError, MtfError,
                                 MultiAxisDimError,
                                 ParseError, ShapeError, UnknownNameError,
                                 UnsplittableDimError)
from mesh_tf.core.mesh_shape import MeshShape, convert_to_mesh_shape
from mesh_tf.core.layout import (LayoutRules, TensorLayout,
                                 convert_to_layout_rules)
