"""Scan a SavedModel's graph, read from ``saved_model.pb`` as data, for ops that leave the tensor world.

"TensorFlow models are programs" (TF SECURITY.md): a signature may call
``tf.io.write_file``. Every function in the library and every node of the
main graph is checked against ``DENIED_OPS``. Checkpoint ops are what the
variables restore needs, so they are allowed only where ``saver_def`` points:
the main-graph nodes the save/restore ops depend on, and the library functions
reachable from them and from nothing else (``tf.saved_model.save`` and Keras
``model.export()`` put ``__inference__traced_save/restore`` functions there).
The same op called from a signature function is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

#: Ops that touch files, the network, the host or Python. Why each is here:
DENIED_OPS: dict[str, str] = {
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


def scan_meta_graph(mg: Any) -> list[OpFinding]:
    """Every denied op in one MetaGraphDef (main graph and the whole function library)."""
    graph = mg.graph_def
    funcs = {f.signature.name: f for f in graph.library.function}
    calls = {name: {c for n in f.node_def for c in _called_functions(n)} for name, f in funcs.items()}
    has_saver = mg.HasField("saver_def")
    save = _saver_nodes(graph, mg.saver_def.save_tensor_name) if has_saver else set()
    restore = _saver_nodes(graph, mg.saver_def.restore_op_name) if has_saver else set()
    save_fns = _closure({c for n in graph.node if n.name in save for c in _called_functions(n)}, calls)
    restore_fns = _closure({c for n in graph.node if n.name in restore for c in _called_functions(n)}, calls)
    # Every other function is a root of its own (the object graph and signatures name them);
    # a saver function also reachable from one of them gets no exemption.
    other_roots = {c for n in graph.node if n.name not in save | restore for c in _called_functions(n)}
    reached = _closure(other_roots | (set(funcs) - save_fns - restore_fns), calls)
    main_assets = {a.tensor_info.name.split(":")[0] for a in mg.asset_file_def if _inside(a.filename)}
    own_assets = _asset_arguments(mg, funcs, {c for cs in calls.values() for c in cs}, main_assets)
    found: list[OpFinding] = []
    for n in graph.node:
        found.extend(_check(n, "main graph", save=n.name in save, restore=n.name in restore, assets=main_assets))
    for name, f in funcs.items():
        ok_save, ok_restore = name in save_fns - reached, name in restore_fns - reached
        for n in f.node_def:
            found.extend(
                _check(n, f"function {name}", save=ok_save, restore=ok_restore, assets=own_assets.get(name, set()))
            )
    return found


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


def _check(node: Any, where: str, *, save: bool, restore: bool, assets: set[str]) -> Iterator[OpFinding]:
    op = node.op
    if op in _VOCAB_OPS and len(node.input) > 1 and node.input[1].split(":")[0] in assets:
        return  # the SavedModel's own vocabulary file (assets/), which TF reads at load
    if op in DENIED_OPS:
        yield OpFinding(op, node.name, where, DENIED_OPS[op])
    elif op in SAVE_OPS and not save:
        yield OpFinding(op, node.name, where, SAVE_OPS[op] + " outside the saver's save path")
    elif op in RESTORE_OPS and not restore:
        yield OpFinding(op, node.name, where, RESTORE_OPS[op] + " outside the variables restore")
    elif op == "PrintV2":
        stream = node.attr["output_stream"].s.decode("utf-8", "replace") if "output_stream" in node.attr else ""
        if stream.startswith("file://"):
            yield OpFinding(op, node.name, where, f"prints to {stream}")


def scan_saved_model(sm: Any) -> list[OpFinding]:
    """Findings over every MetaGraphDef of a parsed ``SavedModel`` proto."""
    return [f for mg in sm.meta_graphs for f in scan_meta_graph(mg)]
