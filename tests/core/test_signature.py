from __future__ import annotations

import pytest

from fwx.errors import InputError, UsageError
from fwx.signature import Signature, TensorSpec, concrete_shape, normalize_dtype, parse_tensor_spec


def test_parse_spec_with_symbols_and_minus_one() -> None:
    spec = parse_tensor_spec("image:float32[N,3,-1,224]")
    assert spec.name == "image"
    assert spec.dtype == "float32"
    assert spec.shape == ("N", 3, "image_d2", 224)
    assert spec.dynamic_axes == (0, 2)
    assert spec.kserve_shape() == [-1, 3, -1, 224]
    assert str(spec) == "image:float32[N,3,image_d2,224]"


@pytest.mark.parametrize("text", ["image", "image:float32", "x:float32[3,,a-b]", ":float32[1]", "x:float32[-2]"])
def test_parse_spec_rejects_garbage(text: str) -> None:
    with pytest.raises(UsageError):
        parse_tensor_spec(text)


def test_unknown_dtype_is_input_error() -> None:
    with pytest.raises(InputError, match="unknown dtype"):
        parse_tensor_spec("x:floaty[1]")


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ("FP32", "float32"),
        ("fp16", "float16"),
        ("int", "int64"),
        ("torch.int64", "int64"),
        ("<dtype: 'float32'>", "float32"),
        ("BYTES", "bytes"),
    ],
)
def test_normalize_dtype(given: str, want: str) -> None:
    assert normalize_dtype(given) == want


def test_signature_roundtrip_and_duplicates() -> None:
    sig = Signature((TensorSpec("a", "float32", ("N", 4)),), (TensorSpec("y", "float32", ("N", 2)),))
    assert Signature.from_json(sig.to_json()) == sig
    with pytest.raises(UsageError, match="duplicate input"):
        Signature((TensorSpec("a", "float32", (1,)), TensorSpec("a", "int64", (1,))))


def test_fits_and_concrete_shape() -> None:
    spec = TensorSpec("x", "float32", ("N", 3))
    assert spec.fits((5, 3))
    assert not spec.fits((5, 4))
    assert not spec.fits((5,))
    assert concrete_shape(spec, {"N": 7}) == (7, 3)


def test_one_spelling_for_dynamic_dims_in_user_output() -> None:
    """N for a dynamic first axis whatever its symbol; NAME_dI for made-up symbols elsewhere; user names kept."""
    from fwx.signature import TensorSpec, shape_text

    assert str(TensorSpec("x", "float32", (-1, 3, 32, 32))) == "x:float32[N,3,32,32]"
    assert str(TensorSpec("x", "float32", ("s40", "s41", 4))) == "x:float32[N,x_d1,4]"
    assert str(TensorSpec("ids", "int64", ("batch", "seq"))) == "ids:int64[N,seq]"
    assert str(TensorSpec("ids", "int64", ("N", "unk__7", -1))) == "ids:int64[N,ids_d1,ids_d2]"
    assert shape_text([-1, 10], "logits") == "[N,10]"


def test_a_made_up_symbol_shared_between_tensors_is_spelled_once() -> None:
    """A .pt2's s53 shared by input_ids and attention_mask reads input_ids_d1 in both (and in the output);
    -1 and distinct made-up symbols stay per tensor, so a format that cannot share shows that it does not."""
    from fwx.signature import Signature, TensorSpec

    shared = Signature(
        (TensorSpec("input_ids", "int64", ("s43", "s53")), TensorSpec("attention_mask", "int64", ("s43", "s53"))),
        (TensorSpec("out", "float32", ("s43", "s53", 32)),),
    )
    assert str(shared) == (
        "(input_ids:int64[N,input_ids_d1], attention_mask:int64[N,input_ids_d1]) -> (out:float32[N,input_ids_d1,32])"
    )
    apart = Signature(
        (TensorSpec("input_ids", "int64", (-1, -1)), TensorSpec("attention_mask", "int64", (-1, "unk__3"))),
        (TensorSpec("out", "float32", (-1, "seq")),),
    )
    assert (
        str(apart)
        == "(input_ids:int64[N,input_ids_d1], attention_mask:int64[N,attention_mask_d1]) -> (out:float32[N,seq])"
    )


def test_first_axes_of_different_sizes_are_not_all_spelled_n() -> None:
    """CLIP takes texts and images in separate batches: spelling both N (and the output's images x texts as
    [N,input_ids_d0]) hid that they differ. With one leading symbol it stays N."""
    from fwx.signature import Signature, TensorSpec

    pinned = Signature(
        (
            TensorSpec("input_ids", "int64", ("input_ids_d0", "input_ids_d1")),
            TensorSpec("pixel_values", "float32", ("pixel_values_d0", 3, 32, 32)),
        ),
        (TensorSpec("logits_per_image", "float32", ("pixel_values_d0", "input_ids_d0")),),
    )
    assert str(pinned) == (
        "(input_ids:int64[input_ids_d0,input_ids_d1], pixel_values:float32[pixel_values_d0,3,32,32])"
        " -> (logits_per_image:float32[pixel_values_d0,input_ids_d0])"
    )
    read_back = Signature(
        (TensorSpec("input_ids", "int64", ("s43", "s53")), TensorSpec("pixel_values", "float32", ("s99", 3, 32, 32))),
        (TensorSpec("logits_per_image", "float32", ("s99", "s43")),),
    )
    assert str(read_back) == (
        "(input_ids:int64[input_ids_d0,input_ids_d1], pixel_values:float32[pixel_values_d0,3,32,32])"
        " -> (logits_per_image:float32[pixel_values_d0,input_ids_d0])"
    )
