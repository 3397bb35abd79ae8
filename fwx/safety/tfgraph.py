"""Scan a SavedModel's graph, read from ``saved_model.pb`` as data, against an op allow-list.

"TensorFlow models are programs" (TF SECURITY.md), so every node of the main
graph and of every function in the library (nested calls included) must be
on ``tf_allowed_ops.ALLOWED_OPS`` (tensor computation, derived from TF's own
op families); anything else (file, network, host, Python, dataset and
graph-from-data ops, unknown custom ops) is refused by name. Three ops pass
only with a proof: a text-file table initializer over the model's own asset,
``PrintV2`` not to a file, and the checkpoint ops inside the saver's own
subgraph. The saver exemption holds only if that subgraph (the main-graph
nodes ``saver_def`` names and the library functions reachable from them and
from nothing else) is exactly what ``tf.saved_model.save``, Keras
``model.export()`` and TF1's ``Saver`` write (``SAVER_GLUE`` around the
checkpoint ops), no signature reaches it, and every restore reads the file
the loader feeds (``saver_def.filename_tensor_name``), never a constant path.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from fwx.safety.tf_allowed_ops import ALLOWED_OPS

#: Why some ops off the allow-list are refused, for the message (the rule is the allow-list, not this table).
HOST_OP_REASONS: dict[str, str] = {
    # direct file access
    "WriteFile": "writes a file",
    "ReadFile": "reads a file",
    "MatchingFiles": "lists files",
    "ImmutableConst": "memory-maps a file",
    "FileSystemSetConfiguration": "reconfigures file systems",
    "DecodeProtoV2": "descriptor_source can name a file",
    "EncodeProto": "descriptor_source can name a file",
    "InitializeTableFromTextFile": "reads a vocabulary file",
    "InitializeTableFromTextFileV2": "reads a vocabulary file",
    "LoadAndRemapMatrix": "reads a checkpoint file",
    "GenerateVocabRemapping": "reads vocabulary files",
    # running Python
    "PyFunc": "runs Python code",
    "PyFuncStateless": "runs Python code",
    "EagerPyFunc": "runs Python code",
    # summaries and debuggers write event files or send to URLs
    "CreateSummaryFileWriter": "writes event files",
    "CreateSummaryDbWriter": "writes a database",
    "WriteSummary": "writes event files",
    "WriteScalarSummary": "writes event files",
    "WriteHistogramSummary": "writes event files",
    "WriteImageSummary": "writes event files",
    "WriteAudioSummary": "writes event files",
    "WriteGraphSummary": "writes event files",
    "WriteRawProtoSummary": "writes event files",
    "ImportEvent": "writes event files",
    "FlushSummaryWriter": "writes event files",
    "CloseSummaryWriter": "writes event files",
    "SummaryWriter": "writes event files",
    "DebugIdentity": "sends tensors to debug URLs",
    "DebugIdentityV2": "writes debug dumps",
    "DebugIdentityV3": "sends tensors to debug URLs",
    "DebugNanCount": "sends tensors to debug URLs",
    "DebugNumericSummary": "sends tensors to debug URLs",
    "DebugNumericSummaryV2": "writes debug dumps",
    # the network
    "RpcClient": "opens network connections",
    "RpcCall": "opens network connections",
    "RpcServer": "opens a network server",
    "RpcServerStart": "opens a network server",
    "RpcServerRegister": "opens a network server",
    "Rpc": "opens network connections",
    "TryRpc": "opens network connections",
    "DataServiceDataset": "opens network connections",
    "DataServiceDatasetV2": "opens network connections",
    "DataServiceDatasetV3": "opens network connections",
    "DataServiceDatasetV4": "opens network connections",
    "RegisterDataset": "opens network connections",
    "RegisterDatasetV2": "opens network connections",
    # dataset and reader ops read or write files
    "TFRecordDataset": "reads files",
    "TFRecordDatasetV2": "reads files",
    "FixedLengthRecordDataset": "reads files",
    "FixedLengthRecordDatasetV2": "reads files",
    "TextLineDataset": "reads files",
    "CSVDataset": "reads files",
    "CSVDatasetV2": "reads files",
    "ExperimentalCSVDataset": "reads files",
    "LMDBDataset": "reads files",
    "ExperimentalLMDBDataset": "reads files",
    "SqlDataset": "opens a database",
    "ExperimentalSqlDataset": "opens a database",
    "MatchingFilesDataset": "lists files",
    "ExperimentalMatchingFilesDataset": "lists files",
    "CacheDataset": "writes cache files",
    "CacheDatasetV2": "writes cache files",
    "SnapshotDataset": "writes files",
    "SnapshotDatasetV2": "writes files",
    "SnapshotDatasetReader": "reads files",
    "SaveDataset": "writes files",
    "SaveDatasetV2": "writes files",
    "LoadDataset": "reads files",
    "DatasetToTFRecord": "writes files",
    "ExperimentalDatasetToTFRecord": "writes files",
    "DistributedSave": "writes files",
    "TFRecordReader": "reads files",
    "TFRecordReaderV2": "reads files",
    "TextLineReader": "reads files",
    "TextLineReaderV2": "reads files",
    "FixedLengthRecordReader": "reads files",
    "FixedLengthRecordReaderV2": "reads files",
    "WholeFileReader": "reads files",
    "WholeFileReaderV2": "reads files",
    "LMDBReader": "reads files",
    "IdentityReader": "reads files",
    "IdentityReaderV2": "reads files",
    "ReaderRestoreState": "reads reader state",
    "ReaderRestoreStateV2": "reads reader state",
}
#: Checkpoint ops pass only inside the saver's own subgraph: restore ops on the restore path (run at
#: load to read the variables), save ops on the save path (never run by a load or an inference).
RESTORE_OPS: dict[str, str] = {
    "Restore": "reads a checkpoint",
    "RestoreSlice": "reads a checkpoint",
    "RestoreV2": "reads a checkpoint",
}
SAVE_OPS: dict[str, str] = {
    "Save": "writes a checkpoint",
    "SaveSlices": "writes a checkpoint",
    "SaveV2": "writes a checkpoint",
    "MergeV2Checkpoints": "writes and deletes checkpoint files",
}


#: What the saver's subgraph holds around the checkpoint ops, as tf.saved_model.save, Keras export()
#: and TF1's Saver write it (variables, lookup-table export/import, file-name plumbing).
SAVER_GLUE = frozenset(
    {
        "Const", "Identity", "IdentityN", "NoOp", "Placeholder", "PlaceholderWithDefault",
        "StatefulPartitionedCall", "PartitionedCall", "VarHandleOp", "VariableV2", "Variable",
        "ReadVariableOp", "AssignVariableOp", "Assign", "DisableCopyOnRead", "Pack", "Select",
        "StaticRegexFullMatch", "StringJoin", "ShardedFilename", "ShardedFilespec", "HashTableV2",
        "MutableHashTableV2", "MutableHashTableOfTensorsV2", "MutableDenseHashTableV2",
        "LookupTableExportV2", "LookupTableImportV2",
    }
)  # fmt: skip


@dataclass(frozen=True)
class OpFinding:
    op: str
    node: str
    where: str  # "main graph" or "function <name>"
    why: str

    def __str__(self) -> str:
        return f"{self.op} ({self.why}) at node {self.node!r} in {self.where}"


def _called_functions(node: Any) -> Iterator[str]:
    """Names of library functions a node calls (PartitionedCall ``f``, While/If/Case branches, ...)."""
    for value in node.attr.values():
        kind = value.WhichOneof("value")
        if kind == "func":
            yield value.func.name
        elif kind == "list":
            yield from (f.name for f in value.list.func)


def _closure(roots: Iterable[str], calls: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    todo = [r for r in roots if r in calls]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(c for c in calls[name] if c in calls and c not in seen)
    return seen


def _saver_nodes(graph: Any, tensor: str) -> set[str]:
    """Main-graph nodes that the save or restore op named by ``saver_def`` depends on."""
    nodes = {n.name: n for n in graph.node}
    roots = [tensor.split(":")[0].lstrip("^")] if tensor else []
    seen: set[str] = set()
    todo = [r for r in roots if r in nodes]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(i.split(":")[0].lstrip("^") for i in nodes[name].input if i.split(":")[0].lstrip("^") in nodes)
    return seen


#: Nodes a signature and the saver may both depend on: they hold state, they run nothing.
_SHARED_SOURCES = frozenset(
    {"VarHandleOp", "VariableV2", "Variable", "Const", "Placeholder", "HashTableV2", "MutableHashTableV2",
     "MutableHashTableOfTensorsV2", "MutableDenseHashTableV2"}
)  # fmt: skip


@dataclass(frozen=True)
class _Saver:
    """The saver subgraph that earned the checkpoint exemption (empty sets when it did not)."""

    save: frozenset[str] = frozenset()  # main-graph nodes
    restore: frozenset[str] = frozenset()
    save_fns: frozenset[str] = frozenset()
    restore_fns: frozenset[str] = frozenset()
    filename: str = ""  # the node the loader feeds with the variables path
    prefix_args: dict[str, frozenset[str]] | None = None  # restore fn -> args that carry that path


def scan_meta_graph(mg: Any) -> list[OpFinding]:
    """Every node of one MetaGraphDef (main graph and the whole function library) off the allow-list."""
    graph = mg.graph_def
    funcs = {f.signature.name: f for f in graph.library.function}
    calls = {name: {c for n in f.node_def for c in _called_functions(n)} for name, f in funcs.items()}
    saver = _saver(mg, funcs, calls)
    main_assets = {a.tensor_info.name.split(":")[0] for a in mg.asset_file_def if _inside(a.filename)}
    own_assets = _asset_arguments(mg, funcs, {c for cs in calls.values() for c in cs}, main_assets)
    found: list[OpFinding] = []
    for n in graph.node:
        side = "save" if n.name in saver.save else "restore" if n.name in saver.restore else ""
        ok_prefix = {saver.filename}
        found.extend(_check(n, "main graph", side=side, assets=main_assets, prefixes=ok_prefix))
    for name, f in funcs.items():
        side = "save" if name in saver.save_fns else "restore" if name in saver.restore_fns else ""
        prefixes = set((saver.prefix_args or {}).get(name, frozenset()))
        assets = own_assets.get(name, set())
        for n in f.node_def:
            found.extend(_check(n, f"function {name}", side=side, assets=assets, prefixes=prefixes))
    return found


def _saver(mg: Any, funcs: dict[str, Any], calls: dict[str, set[str]]) -> _Saver:
    """The save and restore subgraphs ``saver_def`` names, each kept only if it is exactly a saver."""
    if not mg.HasField("saver_def"):
        return _Saver()
    graph = mg.graph_def
    signature = _signature_nodes(mg)
    filename = mg.saver_def.filename_tensor_name.split(":")[0]
    sides = {}
    for side, tensor, extra in (
        ("save", mg.saver_def.save_tensor_name, SAVE_OPS),
        ("restore", mg.saver_def.restore_op_name, RESTORE_OPS),
    ):
        nodes = _saver_nodes(graph, tensor)
        fns = _closure({c for n in graph.node if n.name in nodes for c in _called_functions(n)}, calls)
        sides[side] = (nodes, fns) if _is_saver(graph, funcs, nodes, fns, signature, set(extra)) else (set(), set())
    # a function also reachable from outside the saver gets no exemption
    other_roots = {
        c for n in graph.node if n.name not in sides["save"][0] | sides["restore"][0] for c in _called_functions(n)
    }
    saver_fns = sides["save"][1] | sides["restore"][1]
    reached = _closure(other_roots | (set(funcs) - saver_fns), calls)
    restore_fns = frozenset(sides["restore"][1] - reached)
    # TF runs restore_op_name at load: nothing it reaches is ever exempt as a save, whether or not the
    # restore side earned its own exemption (a NoOp depending only on a SaveV2 is no restore at all)
    at_load = _saver_nodes(graph, mg.saver_def.restore_op_name)
    at_load_fns = _closure({c for n in graph.node if n.name in at_load for c in _called_functions(n)}, calls)
    return _Saver(
        save=frozenset(sides["save"][0] - at_load),
        restore=frozenset(sides["restore"][0]),
        save_fns=frozenset(sides["save"][1] - reached - at_load_fns),
        restore_fns=restore_fns,
        filename=filename,
        prefix_args=_prefix_args(graph, funcs, restore_fns, filename),
    )


def _is_saver(
    graph: Any, funcs: dict[str, Any], nodes: set[str], fns: set[str], signature: set[str], extra: set[str]
) -> bool:
    """Only saver ops, and no signature depends on any of them but the variables and tables both read."""
    shared = {n.op for n in graph.node if n.name in nodes & signature}
    if not shared <= _SHARED_SOURCES:
        return False
    allowed = SAVER_GLUE | extra
    main_ops = {n.op for n in graph.node if n.name in nodes}
    fn_ops = {n.op for f in fns if f in funcs for n in funcs[f].node_def}
    return main_ops | fn_ops <= allowed


def _signature_nodes(mg: Any) -> set[str]:
    """Main-graph nodes any signature's inputs or outputs depend on (what an inference runs)."""
    tensors = [t.name for sig in mg.signature_def.values() for t in (*sig.inputs.values(), *sig.outputs.values())]
    out: set[str] = set()
    for t in tensors:
        out |= _saver_nodes(mg.graph_def, t)
    return out


def _prefix_args(graph: Any, funcs: dict[str, Any], fns: frozenset[str], filename: str) -> dict[str, frozenset[str]]:
    """Per restore function, the arguments every main-graph caller feeds with the loader's file name."""
    out: dict[str, frozenset[str]] = {}
    for name in fns:
        args = [a.name for a in funcs[name].signature.input_arg]
        callers = [n for n in graph.node if name in set(_called_functions(n))]
        fed = {
            args[i]
            for i in range(len(args))
            if callers and all(len(c.input) > i and c.input[i].split(":")[0] == filename for c in callers)
        }
        out[name] = frozenset(fed)
    return out


#: Ops that read a vocabulary file: allowed when the file is one of the SavedModel's own assets.
_VOCAB_OPS = frozenset({"InitializeTableFromTextFile", "InitializeTableFromTextFileV2"})


def _inside(filename: str) -> bool:
    """An asset name TF resolves inside the SavedModel's ``assets/`` (no absolute path, no ``..``)."""
    from pathlib import PurePosixPath

    p = PurePosixPath(filename.replace("\\", "/"))
    return bool(filename) and not p.is_absolute() and ".." not in p.parts and ":" not in filename


def _asset_arguments(
    mg: Any, funcs: dict[str, Any], called_by_functions: set[str], main_assets: set[str]
) -> dict[str, set[str]]:
    """Per library function, the arguments that can only be one of the SavedModel's own asset files.

    A TF2 SavedModel binds a function's trailing arguments to object-graph nodes (``bound_inputs``): a
    vocabulary table's initializer takes its file as an ``asset`` node, which the loader resolves to
    ``assets/<filename>``. Its TF1-style main graph calls the same initializer with the ``asset_file_def``
    tensor, which the loader feeds the same way. Any other caller could pass any path: then no argument
    qualifies.
    """
    nodes = mg.object_graph_def.nodes
    files = mg.asset_file_def
    callers: dict[str, list[Any]] = {}
    for n in mg.graph_def.node:
        for fn in _called_functions(n):
            callers.setdefault(fn, []).append(n)
    main_assets = main_assets | _asset_variables(mg.graph_def, main_assets)
    out: dict[str, set[str]] = {}
    for name, cf in mg.object_graph_def.concrete_functions.items():
        f = funcs.get(name)
        if f is None or name in called_by_functions:
            continue
        args = [a.name for a in f.signature.input_arg]
        first = len(args) - len(cf.bound_inputs)
        for i, node_id in enumerate(cf.bound_inputs, start=first):
            node = nodes[node_id] if 0 <= node_id < len(nodes) else None
            if node is None or node.WhichOneof("kind") != "asset":
                continue
            index = node.asset.asset_file_def_index
            fed = all(len(c.input) > i and c.input[i].split(":")[0] in main_assets for c in callers.get(name, []))
            if 0 <= index < len(files) and _inside(files[index].filename) and fed:
                out.setdefault(name, set()).add(args[i])
    return out


def _asset_variables(graph: Any, main_assets: set[str]) -> set[str]:
    """Main-graph reads of a variable that is only ever assigned an asset path: ``tf.saved_model.save``
    keeps each asset path in such a variable (assigned from the ``asset_file_def`` placeholder)."""
    assigned: dict[str, set[str]] = {}
    for n in graph.node:
        if n.op in ("AssignVariableOp", "Assign") and len(n.input) > 1:
            assigned.setdefault(n.input[0].split(":")[0], set()).add(n.input[1].split(":")[0])
    return {
        n.name
        for n in graph.node
        if n.op == "ReadVariableOp"
        and n.input
        and (values := assigned.get(n.input[0].split(":")[0]))
        and values <= main_assets
    }


def _check(node: Any, where: str, *, side: str, assets: set[str], prefixes: set[str]) -> Iterator[OpFinding]:
    op = node.op
    if op in _VOCAB_OPS:
        if len(node.input) > 1 and node.input[1].split(":")[0] in assets:
            return  # the SavedModel's own vocabulary file (assets/), which TF reads at load
        yield OpFinding(op, node.name, where, "reads a vocabulary file that is not the model's own asset")
    elif op == "PrintV2":
        stream = node.attr["output_stream"].s.decode("utf-8", "replace") if "output_stream" in node.attr else ""
        if stream.startswith("file://"):
            yield OpFinding(op, node.name, where, f"prints to {stream}")
    elif op in RESTORE_OPS and side == "restore":
        if not node.input or node.input[0].split(":")[0] not in prefixes:
            yield OpFinding(op, node.name, where, "reads a checkpoint other than the one the loader feeds")
    elif op in SAVE_OPS and side == "save" or side and op in SAVER_GLUE:
        return  # the saver's own subgraph, checked whole by _is_saver
    elif op not in ALLOWED_OPS:
        why = HOST_OP_REASONS.get(op) or RESTORE_OPS.get(op) or SAVE_OPS.get(op) or "not on the op allow-list"
        yield OpFinding(op, node.name, where, why)


def scan_saved_model(sm: Any) -> list[OpFinding]:
    """Findings over every MetaGraphDef of a parsed ``SavedModel`` proto."""
    return [f for mg in sm.meta_graphs for f in scan_meta_graph(mg)]
