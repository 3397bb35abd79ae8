"""``.pt2`` sources saved with shared ``Dim``s: pinned with shared symbols, copied to ``.pt2``, held to sharing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fwx.errors import SignatureMismatchError
from fwx.exporter import ExportOptions, export
from fwx.exporter.readback import check_readback
from fwx.formats import Format
from fwx.manifest import sha256_path
from fwx.runtimes.base import load_runtime
from fwx.signature import Signature, TensorSpec

torch = pytest.importorskip("torch")

from . import pt2_models  # noqa: E402 - needs torch


@pytest.fixture(scope="module")
def encoder_pt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pt2_models.save_encoder(tmp_path_factory.mktemp("pt2") / "encoder.pt2")


@pytest.fixture(scope="module")
def encoder_export(encoder_pt2: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return export(encoder_pt2, ["pt2", "onnx"], ExportOptions(out=tmp_path_factory.mktemp("repo")))


def test_inputs_sharing_dims_are_pinned_with_shared_symbols(encoder_export: Any) -> None:
    ids, mask = encoder_export.signature.inputs
    assert ids.shape == mask.shape == ("N", "input_ids_d1")
    assert encoder_export.ok
    assert encoder_export.manifest.artifacts["onnx"].validation["passed"]


def test_pt2_to_pt2_is_a_checked_copy(encoder_export: Any, encoder_pt2: Path) -> None:
    entry = encoder_export.manifest.artifacts["pt2"]
    assert [h["tool"] for h in entry.hops] == ["copy"]
    assert entry.sha256 == sha256_path(encoder_pt2)
    assert entry.validation["passed"]
    read = Signature.from_json(entry.signature)
    assert read.inputs[0].shape == read.inputs[1].shape  # the program's shared batch and sequence symbols


def test_pt2_readback_refuses_an_artifact_that_lets_shared_dims_differ(tmp_path: Path) -> None:
    path = pt2_models.save_two_heads(tmp_path / "two.pt2")
    pinned = Signature(
        (TensorSpec("a", "float32", ("N", 3)), TensorSpec("b", "float32", ("N", 5))),
        (TensorSpec("output_0", "float32", ("N",)), TensorSpec("output_1", "float32", ("N",))),
    )
    rt = load_runtime(Format.PT2, path, signature_hint=pinned, trust_model_code=True)
    try:
        got = rt.signature()
    finally:
        rt.close()
    with pytest.raises(SignatureMismatchError, match="share N in the pin, but the artifact lets them differ"):
        check_readback(Format.PT2, path, pinned, got)


def test_a_trace_that_bakes_the_sequence_length_is_refused(encoder_pt2: Path) -> None:
    from fwx.converters import _torch as tc
    from fwx.sources.load import load_source
    from fwx.sources.pt2 import pt2_inputs
    from fwx.sources.samples import make_feeds

    src = load_source(encoder_pt2, trust=True)
    sig = Signature(pt2_inputs(torch.export.load(encoder_pt2)) or (), (TensorSpec("output_0", "float32", ("N", 4)),))
    sample = make_feeds(sig.inputs, {"N": 2, "input_ids_d1": 3})
    wrapped = tc.wrap(src.obj, sig)
    traced = torch.jit.trace(wrapped, tc.tensors(sample, sig), check_trace=False, strict=False)
    assert "fails at N=5, input_ids_d1=6" in (tc.baked_sizes(traced, wrapped, sig, sample) or "")
    eager_cnn = torch.nn.Sequential(torch.nn.Linear(4, 2)).eval()
    flat = Signature((TensorSpec("x", "float32", ("N", 4)),), (TensorSpec("y", "float32", ("N", 2)),))
    x = make_feeds(flat.inputs, {"N": 2})
    assert (
        tc.baked_sizes(
            torch.jit.trace(tc.wrap(eager_cnn, flat), tc.tensors(x, flat)), tc.wrap(eager_cnn, flat), flat, x
        )
        is None
    )


@pytest.mark.slow
def test_torchscript_from_pt2_runs_at_every_length(encoder_pt2: Path, tmp_path: Path) -> None:
    res = export(encoder_pt2, ["torchscript"], ExportOptions(out=tmp_path))
    entry = res.manifest.artifacts["torchscript"]
    assert [h["tool"] for h in entry.hops] != ["torch.jit.trace"]  # the direct trace baked the length: refused
    module = torch.jit.load(str(res.version_dir / entry.path))
    for batch, length in ((1, 3), (2, 9), (4, 40)):
        out = module(torch.randint(0, 50, (batch, length)), torch.ones(batch, length, dtype=torch.int64))
        assert tuple((out[0] if isinstance(out, tuple) else out).shape) == (batch, 4)


def _program(module: Any, args: tuple[Any, ...], dims: tuple[Any, ...], path: Path) -> Path:
    torch.export.save(torch.export.export(module.eval(), args, dynamic_shapes=dims), path)
    return path


class _Repeat(torch.nn.Module):
    """``y`` is twice as long as ``x`` (a derived Dim, ``2 * d``)."""

    def forward(self, x: Any, y: Any) -> Any:
        return x.repeat_interleave(2, dim=1) + y


def test_pt2_sizes_come_from_the_dims_ranges_and_expressions(tmp_path: Path) -> None:
    """Sizes only where fwx's own (batch 1-3, dims 2-16) do not fit: a Dim whose range starts above them,
    an axis that is an expression of a Dim (and every axis sharing that Dim, so ``y`` stays ``2 * x``)."""
    from fwx.sources.load import load_source

    enc = load_source(pt2_models.save_encoder(tmp_path / "enc.pt2"))  # seq in [2, 64]: the defaults fit
    assert enc.sizes == {}
    b, seq = torch.export.Dim("b", max=32), torch.export.Dim("seq", min=16, max=512)
    ids = torch.randint(0, 50, (2, 20))
    long_only = load_source(
        _program(
            pt2_models.MaskedEncoder(max_len=512), (ids, ids), ({0: b, 1: seq}, {0: b, 1: seq}), tmp_path / "l.pt2"
        )
    )
    assert long_only.inputs is not None
    assert long_only.inputs[0].shape == ("N", "input_ids_d1")
    assert long_only.sizes == {"input_ids_d1": (16, 17)}  # clamped into [16, 512], two sizes
    d = torch.export.Dim("d", min=2, max=100)
    pair = load_source(
        _program(
            _Repeat(), (torch.randn(2, 5), torch.randn(2, 10)), ({0: b, 1: d}, {0: b, 1: 2 * d}), tmp_path / "p.pt2"
        )
    )
    assert pair.sizes == {"x_d1": (8, 12), "y_d1": (16, 24)}


class _Audio(torch.nn.Module):
    """A strided Conv1d over raw samples (``10 * frames``, at least 400) with a mask of the same length:
    the wav2vec2 feature encoder in small. At a length under 10 no runtime can run it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 4, 10, stride=5)

    def forward(self, x: Any, mask: Any) -> Any:
        return self.conv((x * mask).unsqueeze(1)).relu().mean(-1)


def test_a_pt2_whose_dims_admit_only_some_sizes_reaches_every_format(tmp_path: Path) -> None:
    """Probing, tracing, validation, ``fwx validate`` (from fwx.json) and a server's warm-up all draw at sizes
    the program admits; TFLite, whose file says length 1, plans its tensors at the first request's shape."""
    from fwx.manifest import Manifest
    from fwx.runtimes.base import warmup
    from fwx.validators import validate

    torch.manual_seed(0)
    b, frames = torch.export.Dim("b", min=1, max=64), torch.export.Dim("frames", min=40, max=1600)
    x = torch.randn(2, 400)
    src = _program(
        _Audio(), (x, torch.ones_like(x)), ({0: b, 1: 10 * frames}, {0: b, 1: 10 * frames}), tmp_path / "a.pt2"
    )
    res = export(src, ["all"], ExportOptions(out=tmp_path / "repo"))
    assert res.ok, res.failures
    assert res.version_dir is not None
    manifest = Manifest.read(res.version_dir)
    assert sorted(manifest.artifacts) == ["onnx", "pt2", "savedmodel", "tflite", "torchscript"]
    assert res.signature.inputs[1].shape == ("N", "x_d1")  # the same expression is the same symbol
    assert manifest.samples["sizes"] == {"x_d1": [400, 410]}
    assert manifest.warmup_sizes() == {"x_d1": 400}
    report = validate([res.version_dir])
    assert not report.failures(), report.failures()
    loose = [res.version_dir / manifest.artifacts[k].path for k in ("onnx", "pt2", "tflite")]
    report = validate(loose)  # no fwx.json: the sizes come from the .pt2's Dims, whichever file is first
    assert not report.failures(), report.failures()
    tfl = load_runtime(
        Format.TFLITE, res.version_dir / manifest.artifacts["tflite"].path, signature_hint=manifest.sig()
    )
    try:
        warmup(tfl, manifest.sig(), manifest.warmup_sizes())
        with pytest.raises(Exception, match="LiteRT rejected the inputs"):
            warmup(tfl, manifest.sig())  # length 1: the convolution's window does not fit
    finally:
        tfl.close()


def _container(name: str, context: Any) -> type:
    """A dict type registered with torch's pytree under ``name`` (as transformers registers ``ModelOutput``),
    whose tree records ``context(keys)``."""
    import json

    import torch.utils._pytree as pytree

    cls = type(name.rsplit(".", 1)[-1], (dict,), {})
    pytree.register_pytree_node(
        cls,
        lambda d: (list(d.values()), list(d.keys())),
        lambda values, keys: cls(zip(keys, values, strict=True)),
        serialized_type_name=name,
        to_dumpable_context=lambda keys: json.dumps(context(keys)),
        from_dumpable_context=json.loads,
    )
    return cls


class _Classifier(torch.nn.Module):
    def __init__(self, out_type: type) -> None:
        super().__init__()
        self.out_type = out_type
        self.head = torch.nn.Linear(1, 3)

    def forward(self, input_ids: Any, attention_mask: Any) -> Any:
        h = (input_ids.float() * attention_mask).sum(1, keepdim=True)
        return self.out_type(logits=self.head(h), pooled=h)


def _save_without_the_type(tmp_path: Path, name: str, context: Any) -> Path:
    """A program exported with ``kwargs=`` (as Hugging Face users call a model) returning a container type,
    saved, then the type unregistered: what a process that never imported its package sees."""
    import torch.utils._pytree as pytree

    out_type = _container(name, context)
    b, seq = torch.export.Dim("b", max=32), torch.export.Dim("seq", max=64)
    kwargs = {"input_ids": torch.randint(0, 9, (2, 6)), "attention_mask": torch.ones(2, 6, dtype=torch.int64)}
    ep = torch.export.export(
        _Classifier(out_type).eval(),
        (),
        kwargs=kwargs,
        dynamic_shapes={"input_ids": {0: b, 1: seq}, "attention_mask": {0: b, 1: seq}},
    )
    path = tmp_path / "classifier.pt2"
    torch.export.save(ep, path)
    pytree._deregister_pytree_node(out_type)
    return path


def test_a_program_taking_kwargs_and_returning_an_unknown_dict_type_reaches_torch_formats(tmp_path: Path) -> None:
    """``torch.export.export(hf_model, (), kwargs=...)`` returns a ``ModelOutput``, which only importing
    transformers registers: fwx loads it with a plain dict type instead, names the outputs by its keys, and
    calls the program by keyword."""
    path = _save_without_the_type(tmp_path, "fwxtest.modeling_outputs.ClassifierOutput", lambda keys: keys)
    res = export(path, ["pt2", "torchscript", "onnx"], ExportOptions(out=tmp_path / "repo"))
    assert res.ok, res.failures
    assert res.signature.output_names == ["logits", "pooled"]
    assert res.signature.inputs[0].shape == res.signature.inputs[1].shape == ("N", "input_ids_d1")
    assert all(a.validation["passed"] for a in res.manifest.artifacts.values())


def test_a_program_returning_an_unknown_type_that_is_not_a_dict_is_refused_naming_it(tmp_path: Path) -> None:
    from fwx.errors import InputError
    from fwx.sources.load import load_source

    path = _save_without_the_type(tmp_path, "fwxtest.custom.Packed", lambda keys: {"fields": keys})
    with pytest.raises(InputError, match="outputs are a fwxtest.custom.Packed, a type torch rebuilds only by"):
        load_source(path)


class _Pooled(torch.nn.Module):
    """A recommender's pooled ids: ``nn.EmbeddingBag`` over fixed-size 2-D bags."""

    def __init__(self) -> None:
        super().__init__()
        self.bags = torch.nn.EmbeddingBag(30, 4, mode="mean")

    def forward(self, ids: Any) -> Any:
        return self.bags(ids)


def test_sizes_keep_to_the_programs_guards_not_only_its_dim_ranges(tmp_path: Path) -> None:
    """``torch.export`` of ``EmbeddingBag`` over 2-D ids records ``batch >= 2`` as a guard although the
    ``Dim`` starts at 1: validating at batch 1 failed the source itself ("Guard failed") and nothing was
    published. Sizes now keep to the guards (read as data, never evaluated as code); the ONNX file, which
    admits batch 1, is checked at 2 and 3."""
    from fwx.sources.guards import guards
    from fwx.sources.load import load_source

    torch.manual_seed(0)
    b, seq = torch.export.Dim("b", min=1, max=64), torch.export.Dim("seq", min=2, max=32)
    src = _program(_Pooled(), (torch.randint(0, 30, (4, 5)),), ({0: b, 1: seq},), tmp_path / "pooled.pt2")
    program = torch.export.load(src)
    assert guards(program)  # the guard the test is about is really there
    assert load_source(src).sizes["N"] == (2, 3)
    res = export(src, ["onnx"], ExportOptions(out=tmp_path / "repo"))
    assert res.ok, res.failures
    assert res.manifest.samples["sizes"]["N"] == [2, 3]


def test_a_guard_that_is_not_size_arithmetic_is_not_read() -> None:
    from types import SimpleNamespace

    from fwx.sources.guards import guards, holds

    ep = SimpleNamespace(
        _guards_code=[
            "L['x'].size()[0] >= 2",
            "__import__('os').system('touch /tmp/fwx-pwned') == 0",
            "L['x'].size()[0] != L['y'].size()[1] // 2",
        ]
    )
    kept = guards(ep)
    assert len(kept) == 2
    sizes = {("x", 0): 1, ("y", 1): 2}
    assert [holds(g, lambda n, a: sizes[(n, a)]) for g in kept] == [False, False]


class _Bags(torch.nn.Module):
    """The canonical recommender input: a flat id list and where each bag starts in it."""

    def __init__(self) -> None:
        super().__init__()
        self.bags = torch.nn.EmbeddingBag(40, 4, mode="sum")
        self.head = torch.nn.Linear(4, 1)

    def forward(self, item_ids: Any, offsets: Any) -> Any:
        return self.head(self.bags(item_ids, offsets))


def test_ids_with_offsets_reach_every_format_and_the_output_follows_the_bags(tmp_path: Path) -> None:
    """Random integers are no offsets ("offsets[0] has to be 0"): an input named ``*offsets*`` is drawn as
    bag starts into the flat ids. Two ``Dim``s whose ranges both start at 2 were given the same sizes, so
    the output's rows (one per bag) were matched to the ids; each ``Dim`` now gets sizes of its own."""
    ids, bags = torch.export.Dim("ids", min=2, max=4096), torch.export.Dim("bags", min=2, max=256)
    src = _program(
        _Bags(), (torch.randint(0, 40, (10,)), torch.tensor([0, 3, 7])), ({0: ids}, {0: bags}), tmp_path / "r.pt2"
    )
    res = export(src, ["all"], ExportOptions(out=tmp_path / "repo"))
    assert sorted(res.manifest.artifacts) == ["onnx", "pt2", "savedmodel", "tflite", "torchscript"], res.failures
    assert res.signature.outputs[0].shape == ("offsets_d0", 1)
    sizes = res.manifest.samples["sizes"]
    assert sizes["item_ids_d0"] != sizes["offsets_d0"]
