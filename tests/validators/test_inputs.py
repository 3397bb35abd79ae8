"""Generated inputs: seeded, dtype-aware, every dynamic dim at two sizes; user data checked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fwx.errors import InputError
from fwx.signature import Signature, TensorSpec
from fwx.sources.samples import InputConfig, generate_inputs
from fwx.validators.inputs import load_data, load_labels

SIG = Signature(
    (
        TensorSpec("ids", "int64", ("batch", "seq")),
        TensorSpec("mask", "bool", ("batch", "seq")),
        TensorSpec("img", "uint8", (-1, 4, 4, 3)),
        TensorSpec("scale", "float16", (1,)),
    )
)


def test_two_sizes_per_dynamic_dim_and_shared_symbols() -> None:
    samples = generate_inputs(SIG)
    assert len(samples) == 4
    shapes = [(s["ids"].shape, s["mask"].shape, s["img"].shape) for s in samples]
    assert shapes[0] == ((1, 8), (1, 8), (1, 4, 4, 3))
    assert shapes[1] == ((3, 12), (3, 12), (3, 4, 4, 3))
    assert samples[0]["ids"].dtype == np.int64
    assert samples[0]["mask"].dtype == np.bool_
    assert samples[0]["scale"].dtype == np.float16
    assert samples[0]["img"].dtype == np.uint8


def test_seeded_and_ranges() -> None:
    a, b = generate_inputs(SIG, InputConfig(seed=3)), generate_inputs(SIG, InputConfig(seed=3))
    assert all(np.array_equal(x[k], y[k]) for x, y in zip(a, b, strict=True) for k in x)
    c = generate_inputs(SIG, InputConfig(seed=4, int_range=(5, 7), samples=2))
    assert set(np.unique(np.concatenate([s["ids"].ravel() for s in c]))) <= {5, 6}
    assert max(int(s["img"].max()) for s in generate_inputs(SIG)) > 200  # uint8 spans 0..255
    u = generate_inputs(SIG, InputConfig(float_dist="uniform"))
    assert all(float(s["scale"].min()) >= 0 and float(s["scale"].max()) < 1 for s in u)


def test_static_signature_gives_requested_samples() -> None:
    sig = Signature((TensorSpec("x", "float32", (2, 3)),))
    assert [s["x"].shape for s in generate_inputs(sig, InputConfig(samples=3))] == [(2, 3)] * 3


def test_load_data_npz_and_folder(tmp_path: Path) -> None:
    sig = Signature((TensorSpec("x", "float32", ("N", 8)),))
    x = np.ones((5, 8), np.float32)
    np.savez(tmp_path / "d.npz", x=x, labels=np.arange(5))
    data = load_data(tmp_path / "d.npz", sig, samples=4)
    assert data[0]["x"].shape == (4, 8)
    labels = load_labels(tmp_path / "d.npz", 4)
    assert labels is not None
    assert labels.tolist() == [0, 1, 2, 3]
    folder = tmp_path / "f"
    folder.mkdir()
    np.save(folder / "x.npy", x)
    assert load_data(folder, sig)[0]["x"].shape == (5, 8)


@pytest.mark.parametrize(
    ("arrays", "match"),
    [
        ({"x": np.ones((5, 7), np.float32)}, "shape"),
        ({"y": np.ones((5, 8), np.float32)}, "does not take"),
        ({"x": np.ones((5, 8), np.int32)}, "dtype|is int32"),
    ],
)
def test_load_data_that_does_not_fit(tmp_path: Path, arrays: dict[str, np.ndarray], match: str) -> None:
    sig = Signature((TensorSpec("x", "float32", ("N", 8)),))
    np.savez(tmp_path / "d.npz", **arrays)
    with pytest.raises(InputError, match=match):
        load_data(tmp_path / "d.npz", sig)


def test_load_data_unreadable(tmp_path: Path) -> None:
    sig = Signature((TensorSpec("x", "float32", ("N", 8)),))
    (tmp_path / "d.npz").write_bytes(b"junk")
    with pytest.raises(InputError, match="cannot read"):
        load_data(tmp_path / "d.npz", sig)
