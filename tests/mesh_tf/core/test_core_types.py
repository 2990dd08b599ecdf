"""Value types of the language: Dimension, Shape, mesh shapes, LayoutRules,
TensorLayout.  They are immutable, hashable, picklable and print short."""

import copy
import pickle

import pytest

import mesh_tf as mtf
from mesh_tf.core import layout as layout_lib

BATCH, D_MODEL = mtf.Dimension("batch", 8), mtf.Dimension("d_model", 512)


# --- Dimension ---------------------------------------------------------------
def test_dimension_fields_repr_and_conversion():
  assert BATCH.name == "batch" and BATCH.size == 8
  assert repr(BATCH) == "Dimension(batch=8)"
  assert str(BATCH) == "batch=8"
  assert mtf.convert_to_dimension("batch:8") == BATCH
  assert mtf.convert_to_dimension(("batch", 8)) == BATCH
  assert mtf.convert_to_dimension(BATCH) is BATCH
  assert mtf.convert_to_dimension(None) is None


def test_dimension_is_immutable_hashable_picklable():
  with pytest.raises(AttributeError):
    BATCH.size = 16  # pytype: disable=not-writable
  assert {BATCH: 1}[mtf.Dimension("batch", 8)] == 1
  assert hash(BATCH) == hash(mtf.Dimension("batch", 8))
  assert BATCH != mtf.Dimension("batch", 16)
  assert pickle.loads(pickle.dumps(BATCH)) == BATCH
  assert repr(pickle.loads(pickle.dumps(BATCH))) == "Dimension(batch=8)"


# --- Shape ---------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "batch:8,d_model:512", "batch:8;d_model:512", "batch:8 d_model:512",
    "  batch:8 ,\n d_model:512  ", "batch:8;\td_model:512;", "batch:8, d_model:512"])
def test_convert_to_shape_accepts_comma_semicolon_and_whitespace(text):
  s = mtf.convert_to_shape(text)
  assert s == mtf.Shape([BATCH, D_MODEL])
  assert repr(s) == "Shape[batch=8, d_model=512]"


def test_shape_construction_forms_agree():
  expected = mtf.Shape([BATCH, D_MODEL])
  assert mtf.convert_to_shape([BATCH, D_MODEL]) == expected
  assert mtf.convert_to_shape([("batch", 8), ("d_model", 512)]) == expected
  assert mtf.convert_to_shape(["batch:8", "d_model:512"]) == expected
  assert mtf.convert_to_shape(expected) is expected
  assert mtf.convert_to_shape(BATCH) == mtf.Shape([BATCH])
  assert mtf.convert_to_shape(None) is None
  assert mtf.convert_to_shape("") == mtf.Shape([])
  assert repr(mtf.Shape()) == "Shape[]"


def test_shape_accessors():
  s = mtf.convert_to_shape("batch:8,length:4,d_model:512")
  assert s.ndims == len(s) == 3
  assert s.size == 8 * 4 * 512
  assert s.dimension_names == ["batch", "length", "d_model"]
  assert s.to_integer_list() == [8, 4, 512]
  assert s.cumprod() == [1, 8, 32]
  assert s[0] == BATCH and s[-1] == D_MODEL
  assert s[1:] == mtf.convert_to_shape("length:4,d_model:512")
  assert list(s) == s.dims
  assert "batch" in s and BATCH in s and mtf.Dimension("batch", 9) not in s
  assert s.index("length") == 1 and s.index(D_MODEL) == 2
  assert s.get_dim_by_name("d_model") == D_MODEL
  assert s.has_dim_name("length") and not s.has_dim_name("heads")
  assert str(s) == "batch:8,length:4,d_model:512"
  assert mtf.convert_to_shape(str(s)) == s  # str round-trips


def test_shape_algebra():
  s = mtf.convert_to_shape("batch:8,d_model:512")
  assert s + "heads:4" == mtf.convert_to_shape("batch:8,d_model:512,heads:4")
  assert s - "batch" == mtf.Shape([D_MODEL])
  assert s - [BATCH, D_MODEL] == mtf.Shape([])
  assert s.rename_dimension("batch", "b") == mtf.convert_to_shape(
      "b:8,d_model:512")
  assert s.resize_dimension("d_model", 64) == mtf.convert_to_shape(
      "batch:8,d_model:64")
  assert s.is_compatible_with(mtf.convert_to_shape("d_model:512,heads:3"))
  assert not s.is_compatible_with(mtf.convert_to_shape("d_model:64"))
  # The original is unchanged by all of the above.
  assert s == mtf.convert_to_shape("batch:8,d_model:512")


def test_shape_equality_is_ordered_and_sized():
  s = mtf.convert_to_shape("batch:8,d_model:512")
  assert s != mtf.convert_to_shape("d_model:512,batch:8")
  assert s != mtf.convert_to_shape("batch:8,d_model:256")
  # Equality holds between values of one type only (issue 38): a list of
  # dims is not a Shape, and a mesh's shape is not a tensor's.
  assert s == mtf.Shape([BATCH, D_MODEL]) and s != [BATCH, D_MODEL]
  mesh = mtf.convert_to_mesh_shape("rows:2;cols:4")
  assert mesh == mtf.convert_to_mesh_shape("rows:2,cols:4")
  assert mesh != mtf.convert_to_shape("rows:2,cols:4")
  assert mtf.convert_to_shape("rows:2,cols:4") != mesh


def test_mesh_shape_owns_its_text_form():
  mesh = mtf.convert_to_mesh_shape("rows:2, cols:4")
  assert mesh.text == "rows:2;cols:4"
  assert mtf.convert_to_mesh_shape(mesh.text) == mesh


def test_shape_is_immutable_hashable_picklable():
  s = mtf.convert_to_shape("batch:8,d_model:512")
  with pytest.raises(AttributeError):
    s._dims = ()  # pylint: disable=protected-access
  with pytest.raises(AttributeError):
    s.anything = 1
  dims = s.dims
  dims.append(mtf.Dimension("x", 1))  # a copy: the shape does not change
  assert s.ndims == 2
  assert {s: "v"}[mtf.convert_to_shape("batch:8;d_model:512")] == "v"
  assert len({s, mtf.Shape([BATCH, D_MODEL])}) == 1
  for clone in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s),
                copy.copy(s)):
    assert clone == s and hash(clone) == hash(s)
    assert repr(clone) == "Shape[batch=8, d_model=512]"


def test_shape_normalises_integer_like_sizes():
  s = mtf.Shape([("a", 3.0)])
  assert s[0] == mtf.Dimension("a", 3) and isinstance(s[0].size, int)


# --- mesh shapes -----------------------------------------------------------------
@pytest.mark.parametrize("text", ["rows:2;cols:4", "rows:2,cols:4",
                                  "rows:2 cols:4", " rows:2 ;  cols:4 "])
def test_mesh_shape_strings(text):
  m = mtf.convert_to_shape(text)
  assert repr(m) == "Shape[rows=2, cols=4]"
  assert m.size == 8
  impl = mtf.ShapeMeshImpl(text, "")
  assert impl.shape == m and impl.size == 8 and impl.ndims == 2


def test_mesh_processor_coordinates_are_row_major():
  impl = mtf.ShapeMeshImpl("rows:2;cols:4", "")
  assert [impl.pnum_to_processor_coordinates(p) for p in range(8)] == [
      (r, c) for r in range(2) for c in range(4)]
  for p in range(8):
    assert impl.processor_coordinates_to_pnum(
        impl.pnum_to_processor_coordinates(p)) == p
  assert impl.processor_groups((1,)) == [(0, 1, 2, 3), (4, 5, 6, 7)]
  assert impl.processor_groups((0,)) == [(0, 4), (1, 5), (2, 6), (3, 7)]
  assert impl.processor_groups((0, 1)) == [tuple(range(8))]


# --- LayoutRules -------------------------------------------------------------------
@pytest.mark.parametrize("text", ["batch:rows;d_ff:cols", "batch:rows,d_ff:cols",
                                  "d_ff:cols batch:rows",
                                  " batch:rows ;\n d_ff:cols ;"])
def test_convert_to_layout_rules_separators_and_order(text):
  r = mtf.convert_to_layout_rules(text)
  assert repr(r) == "LayoutRules[batch:rows, d_ff:cols]"
  assert str(r) == "batch:rows;d_ff:cols"
  assert r.as_dict() == {"batch": "rows", "d_ff": "cols"}
  assert len(r) == 2 and list(r) == [("batch", "rows"), ("d_ff", "cols")]


def test_layout_rules_construction_forms_agree():
  r = mtf.convert_to_layout_rules("batch:rows;d_ff:cols")
  assert mtf.convert_to_layout_rules({"d_ff": "cols", "batch": "rows"}) == r
  assert mtf.convert_to_layout_rules([("batch", "rows"), ("d_ff", "cols")]) == r
  assert mtf.convert_to_layout_rules(r) is r
  assert mtf.convert_to_layout_rules(str(r)) == r
  assert mtf.convert_to_layout_rules(None) == mtf.LayoutRules()
  assert mtf.convert_to_layout_rules("") == mtf.LayoutRules()
  assert repr(mtf.LayoutRules()) == "LayoutRules[]"
  # A repeated identical rule is harmless.
  assert mtf.convert_to_layout_rules("batch:rows;batch:rows;d_ff:cols") == r


def test_layout_rules_immutable_hashable_picklable():
  r = mtf.convert_to_layout_rules("batch:rows;d_ff:cols")
  with pytest.raises(AttributeError):
    r._pairs = ()  # pylint: disable=protected-access
  assert hash(r) == hash(mtf.convert_to_layout_rules("d_ff:cols,batch:rows"))
  assert {r: 1}[mtf.convert_to_layout_rules("d_ff:cols;batch:rows")] == 1
  assert r != mtf.convert_to_layout_rules("batch:cols;d_ff:rows")
  clone = pickle.loads(pickle.dumps(r))
  assert clone == r and repr(clone) == repr(r)


def test_tensor_dimension_to_mesh_axis():
  r = mtf.convert_to_layout_rules("batch:rows;d_ff:cols")
  mesh = mtf.convert_to_shape("rows:2;cols:4")
  assert r.tensor_dimension_to_mesh_axis(BATCH, mesh) == 0
  assert r.tensor_dimension_to_mesh_axis(mtf.Dimension("d_ff", 8), mesh) == 1
  assert r.tensor_dimension_to_mesh_axis(D_MODEL, mesh) is None
  assert r.tensor_dimension_to_mesh_axis(BATCH, "rows:2;cols:4") == 0


# --- TensorLayout --------------------------------------------------------------------
def test_tensor_layout_from_rules():
  r = mtf.convert_to_layout_rules("batch:rows;d_ff:cols")
  layout = r.tensor_layout("batch:8,d_model:4,d_ff:16", "rows:2;cols:4")
  assert layout == mtf.TensorLayout((0, None, 1))
  assert tuple(layout) == (0, None, 1) and len(layout) == 3
  assert layout[2] == 1
  assert not layout.is_fully_replicated
  assert layout.mesh_axis_to_tensor_axis(2) == (0, 2)
  assert layout.mesh_axis_to_tensor_axis(3) == (0, 2, None)
  rep = r.tensor_layout("d_model:4,heads:2", "rows:2;cols:4")
  assert rep.is_fully_replicated and rep == mtf.TensorLayout((None, None))
  assert repr(layout) == "TensorLayout(tensor_axis_to_mesh_axis=(0, None, 1))"


def test_tensor_layout_immutable_hashable_picklable():
  layout = mtf.TensorLayout((0, None, 1))
  with pytest.raises(AttributeError):
    layout.tensor_axis_to_mesh_axis = (1,)  # pytype: disable=not-writable
  assert hash(layout) == hash(mtf.TensorLayout((0, None, 1)))
  for clone in (pickle.loads(pickle.dumps(layout)), copy.copy(layout),
                copy.deepcopy(layout)):
    assert clone == layout and clone.tensor_axis_to_mesh_axis == (0, None, 1)


def test_slice_shape_and_begin_follow_the_layout():
  impl = mtf.ShapeMeshImpl("rows:2;cols:4", "batch:rows;d_ff:cols")
  shape = mtf.convert_to_shape("batch:8,d_model:4,d_ff:16")
  assert impl.slice_shape(shape) == (4, 4, 4)
  begins = [impl.slice_begin(shape, p) for p in range(8)]
  assert begins == [(4 * r, 0, 4 * c) for r in range(2) for c in range(4)]


def test_layout_cache_is_keyed_by_value():
  # The per-tensor layout cache must not confuse equal-looking inputs.
  r1 = mtf.convert_to_layout_rules("batch:rows")
  r2 = mtf.convert_to_layout_rules("batch:cols")
  shape, mesh = mtf.convert_to_shape("batch:8"), mtf.convert_to_shape(
      "rows:2;cols:4")
  assert layout_lib._tensor_layout(  # pylint: disable=protected-access
      r1, shape, mesh, None) == mtf.TensorLayout((0,))
  assert layout_lib._tensor_layout(  # pylint: disable=protected-access
      r2, shape, mesh, None) == mtf.TensorLayout((1,))


def test_dtypes_normalise_to_names():
  import numpy as np
  assert mtf.as_dtype(None) == "float32"
  assert mtf.as_dtype("float") == "float32"
  assert mtf.as_dtype(np.float32) == "float32"
  assert mtf.as_dtype(np.dtype("int32")) == "int32"
  assert mtf.as_dtype(np.bool_) == "bool"
  assert mtf.core.size_of("bfloat16") == 2
