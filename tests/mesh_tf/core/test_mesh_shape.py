"""MeshShape: parsing once at the edge, repr, hashing, and bad input."""

import pickle

import pytest
from hypothesis import given, strategies as st

import mesh_tf as mtf
from mesh_tf.core.mesh_shape import MeshShape, convert_to_mesh_shape


@pytest.mark.parametrize("text", ["rows:2;cols:4", "rows:2,cols:4",
                                  " rows:2 ;  cols:4 ", "rows:2 cols:4"])
def test_parses_every_separator(text):
  m = convert_to_mesh_shape(text)
  assert isinstance(m, MeshShape)
  assert repr(m) == "MeshShape[rows=2, cols=4]"
  assert m.axis_names == ("rows", "cols") and m.size == 8
  assert m["cols"] == mtf.Dimension("cols", 4) and m[0].size == 2


def test_is_a_value():
  m = convert_to_mesh_shape("rows:2;cols:4")
  assert convert_to_mesh_shape(m) is m          # parsed once, passed through
  assert m == MeshShape([("rows", 2), ("cols", 4)])
  assert m != convert_to_mesh_shape("cols:4;rows:2")   # order matters
  assert len({m, convert_to_mesh_shape("rows:2,cols:4")}) == 1
  again = pickle.loads(pickle.dumps(m))
  assert type(again) is MeshShape and again == m
  with pytest.raises(AttributeError):
    m._dims = ()  # pylint: disable=protected-access


def test_goes_where_a_mesh_shape_went():
  m = convert_to_mesh_shape("rows:2;cols:4")
  s = mtf.convert_to_shape("rows:2;cols:4")
  # A mesh's shape equals only a mesh's shape (issue 38).
  assert m != s and s != m
  assert mtf.convert_to_shape(m) is m
  assert convert_to_mesh_shape(s) == m and convert_to_mesh_shape(
      s) is not s
  # str() keeps the Shape form, which reads back.
  assert convert_to_mesh_shape(str(m)) == m
  assert convert_to_mesh_shape(m.text) == m and m.text == "rows:2;cols:4"
  assert mtf.ShapeMeshImpl(m, "").shape == m


def test_exported_at_top_level():
  assert mtf.MeshShape is MeshShape
  assert mtf.convert_to_mesh_shape is convert_to_mesh_shape


@pytest.mark.parametrize("text, error, message", [
    ("rows:2;cols:x", mtf.ParseError,
     "cannot parse mesh shape 'rows:2;cols:x': size 'x' of mesh axis 'cols' "
     "is not an integer; write mesh axes as name:size"),
    ("rows", mtf.ParseError,
     "cannot parse mesh shape 'rows': item 'rows' is not of the form"),
    ("rows:0;cols:4", mtf.ShapeError,
     "invalid mesh shape 'rows:0;cols:4': mesh axis rows=0 has no "
     "processors; every mesh axis needs a size of at least 1"),
    ("rows:2;rows:4", mtf.ShapeError,
     "invalid mesh shape 'rows:2;rows:4': mesh axes ['rows'] appear more "
     "than once"),
    ("1rows:2", mtf.ShapeError, "invalid mesh shape '1rows:2': invalid "
     "dimension name '1rows'"),
])
def test_bad_strings_are_named(text, error, message):
  with pytest.raises(error) as info:
    convert_to_mesh_shape(text)
  assert str(info.value).startswith(message)
  assert isinstance(info.value, mtf.MtfError)


def test_bad_values():
  with pytest.raises(mtf.ShapeError, match="a mesh shape is required"):
    convert_to_mesh_shape(None)
  with pytest.raises(mtf.ShapeError, match="mesh axis a=0 has no processors"):
    MeshShape([("a", 0)])


@given(st.lists(st.integers(1, 64), min_size=0, max_size=4))
def test_round_trips(sizes):
  m = MeshShape([(f"a{i}", s) for i, s in enumerate(sizes)])
  assert convert_to_mesh_shape(str(m)) == m
  assert convert_to_mesh_shape(m.text) == m
  assert repr(m) == "MeshShape[" + ", ".join(
      f"a{i}={s}" for i, s in enumerate(sizes)) + "]"
