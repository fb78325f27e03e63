"""Encapsulating collections for `torch.export` and restoring them after unflattening
(TorchRec's `torchrec.ir.utils`).

The flow, as in TorchRec::

    model, fqns = encapsulate_ir_modules(model, JsonSerializer)
    ep = torch.export.export(
        model, (kjt,), strict=False, preserve_module_call_signature=tuple(fqns)
    )
    torch.export.save(ep, path)                      # later, anywhere:
    unflat = torch.export.unflatten(torch.export.load(path))
    restored = decapsulate_ir_modules(unflat, JsonSerializer)

`encapsulate_ir_modules` walks the module tree; each module with a serializer gets its
description as a non-persistent `ir_metadata` buffer (JSON bytes) and a shape-only forward.
`decapsulate_ir_modules` walks the unflattened tree bottom-up and rebuilds every module that
carries `ir_metadata`. Ours also copies the module's weights from the program into the
rebuilt module (TorchRec's rebuilt modules are freshly initialized: its users load a state
dict afterwards, which still works).
"""

from __future__ import annotations

import inspect
import logging
import operator
from collections import defaultdict
from typing import cast

import torch
from torch import nn
from torch.export import Dim, ShapesCollection
from torch.export.unflatten import InterpreterModule
from torch.fx import Node

from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.embedding_collection import EmbeddingCollection
from shardrec_embedding.feature_processors import (
    FeatureProcessedEmbeddingBagCollection,
    PositionWeightedModule,
    PositionWeightedModuleCollection,
)
from shardrec_embedding.ir.types import SerializerInterface
from shardrec_embedding.quant import QuantEmbeddingBagCollection, QuantEmbeddingCollection
from shardrec_embedding.regroup import KTRegroupAsDict
from shardrec_jagged import KeyedJaggedTensor

__all__ = [
    "DEFAULT_SERIALIZER_CLS",
    "decapsulate_ir_modules",
    "encapsulate_ir_modules",
    "mark_dynamic_kjt",
    "move_to_copy_nodes_to_device",
    "prune_pytree_flatten_unflatten",
    "qualname",
]

DEFAULT_SERIALIZER_CLS = SerializerInterface
DYNAMIC_DIMS: dict[str, int] = defaultdict(int)
logger = logging.getLogger(__name__)

# The names our collections are stored under: their public (TorchRec-shaped) import paths, so
# that a saved program does not depend on which private module defines a class.
_PUBLIC_NAMES: dict[type[nn.Module], str] = {
    EmbeddingBagCollection: "shardrec.modules.embedding_modules.EmbeddingBagCollection",
    EmbeddingCollection: "shardrec.modules.embedding_modules.EmbeddingCollection",
    FeatureProcessedEmbeddingBagCollection: (
        "shardrec.modules.fp_embedding_modules.FeatureProcessedEmbeddingBagCollection"
    ),
    PositionWeightedModule: "shardrec.modules.feature_processor_.PositionWeightedModule",
    PositionWeightedModuleCollection: (
        "shardrec.modules.feature_processor_.PositionWeightedModuleCollection"
    ),
    KTRegroupAsDict: "shardrec.modules.regroup.KTRegroupAsDict",
    QuantEmbeddingBagCollection: "shardrec.quant.embedding_modules.EmbeddingBagCollection",
    QuantEmbeddingCollection: "shardrec.quant.embedding_modules.EmbeddingCollection",
}


def qualname(m: nn.Module | type[nn.Module]) -> str:
    """The name a module class is serialized under: for shardrec's collections their public
    path (`shardrec.modules.embedding_modules.EmbeddingBagCollection`), else
    `module.qualname` of the class."""
    cls = type(m) if isinstance(m, nn.Module) else m
    public = _PUBLIC_NAMES.get(cls)
    return public if public is not None else f"{cls.__module__}.{cls.__qualname__}"


def encapsulate_ir_modules(
    module: nn.Module,
    serializer: type[SerializerInterface] = DEFAULT_SERIALIZER_CLS,
    fqn: str = "",
) -> tuple[nn.Module, list[str]]:
    """Encapsulate (in place) every module of `module`'s tree that `serializer` knows; returns
    `module` and the fully qualified names of the encapsulated modules, which
    `torch.export.export` must get as `preserve_module_call_signature`."""
    preserved: list[str] = []
    if qualname(module) in serializer.module_to_serializer_cls:
        children = serializer.encapsulate_module(module)
        preserved.append(fqn)
    else:
        children = [name for name, _ in module.named_children()]
    for child in children:
        child_fqn = f"{fqn}.{child}" if fqn else child
        _, found = encapsulate_ir_modules(module.get_submodule(child), serializer, child_fqn)
        preserved.extend(found)
    return module, preserved


def decapsulate_ir_modules(
    module: nn.Module,
    serializer: type[SerializerInterface] = DEFAULT_SERIALIZER_CLS,
    device: torch.device | None = None,
    finalize_interpreter_modules: bool = False,
    short_circuit_pytree_ebc_regroup: bool = False,
) -> nn.Module:
    """Rebuild (bottom-up) every module of an unflattened program that carries `ir_metadata`.

    device: where rebuilt modules live (default: where they were exported from).
    short_circuit_pytree_ebc_regroup: pass KeyedTensors from collections straight into the
    `KTRegroupAsDict` modules (removes the graph's flatten/unflatten between them, so a
    collection swapped in later may order its keys differently); needs
    `finalize_interpreter_modules=True`.
    """
    if short_circuit_pytree_ebc_regroup and not finalize_interpreter_modules:
        raise ValueError(
            "decapsulate_ir_modules: short_circuit_pytree_ebc_regroup=True needs "
            "finalize_interpreter_modules=True"
        )
    for name, child in list(module.named_children()):
        setattr(module, name, decapsulate_ir_modules(child, serializer, device))
    _trim_call_module_args(module)
    if "ir_metadata" in dict(module.named_buffers(recurse=False)):
        module = serializer.decapsulate_module(module, device)
    if short_circuit_pytree_ebc_regroup:
        module = _short_circuit_pytree_ebc_regroup(module)
    if finalize_interpreter_modules:
        for m in module.modules():
            if isinstance(m, InterpreterModule):
                m.finalize()  # type: ignore[no-untyped-call]
    return module


def _positional_count(module: nn.Module) -> int | None:
    """How many positional arguments `module`'s forward takes (None: any number)."""
    params = inspect.signature(module.forward).parameters.values()
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def _trim_call_module_args(module: nn.Module) -> None:
    """Drop the extra leading arguments unflatten passes to a rebuilt module.

    When a symbolic size used inside a preserved module was computed outside it (e.g. from the
    input's offsets), `torch.export.unflatten` passes the tensors that define the size as
    extra leading inputs of the call; the rebuilt (real) module takes only its own inputs.
    """
    graph = getattr(module, "graph", None)
    if not isinstance(graph, torch.fx.Graph):
        return
    for node in graph.nodes:
        if node.op != "call_module":
            continue
        try:
            callee = module.get_submodule(str(node.target))
        except AttributeError:
            continue
        if isinstance(callee, InterpreterModule):
            continue
        expected = _positional_count(callee)
        if expected is not None and len(node.args) > expected:
            node.args = tuple(node.args[len(node.args) - expected :])
    graph.eliminate_dead_code()
    graph_module = getattr(module, "graph_module", None)  # set once finalized
    if isinstance(graph_module, torch.fx.GraphModule):
        graph_module.recompile()


def _get_dim(name: str, min: int | None = None, max: int | None = None) -> Dim:
    """A `Dim` named `name_<n>`, n counting the dims made under that name."""
    dim = Dim(f"{name}_{DYNAMIC_DIMS[name]}", min=min, max=max)
    DYNAMIC_DIMS[name] += 1
    return dim


def _has_dim(t: torch.Tensor | None) -> bool:
    return t is not None and t.dim() > 0


def mark_dynamic_kjt(
    kjt: KeyedJaggedTensor,
    shapes_collection: ShapesCollection | None = None,
    variable_length: bool = False,
    variable_batch: bool = False,
    vlen: Dim | None = None,
    llen: Dim | None = None,
) -> ShapesCollection:
    """Declare `kjt`'s sizes dynamic for `torch.export` (TorchRec's semantics).

    Always: the id count (values, and weights with it; dim `vlen`, at least 2). An empty
    `values` is replaced by two ids (torch.export cannot make a size-0 dim dynamic); with
    all-zero lengths the ids are never read.
    variable_length: lengths (dim `llen`) and offsets (`llen + 1`) too: any number of bags.
    variable_batch: lengths/offsets are `batch * len(keys)` (`+ 1`), batch dynamic.
    Returns `shapes_collection` (a new one when None) with the entries added; pass
    `collection.dynamic_shapes(model, args)` to `torch.export.export`.
    """
    shapes = shapes_collection
    if shapes is None:
        shapes = ShapesCollection()  # type: ignore[no-untyped-call]
    vlen = _get_dim("vlen", min=2) if vlen is None else vlen
    if _has_dim(kjt._values):
        if kjt._values.numel() == 0:
            kjt._values = torch.ones(2, device=kjt._values.device, dtype=kjt._values.dtype)
        shapes[kjt._values] = (vlen,)
    if _has_dim(kjt._weights):
        shapes[cast(torch.Tensor, kjt._weights)] = (vlen,)
    if variable_length:
        llen = _get_dim("llen") if llen is None else llen
        if _has_dim(kjt._lengths):
            shapes[cast(torch.Tensor, kjt._lengths)] = (llen,)
        if _has_dim(kjt._offsets):
            shapes[cast(torch.Tensor, kjt._offsets)] = (llen + 1,)
    elif variable_batch and kjt.keys():
        batch = _get_dim("batch_size")
        num_keys = len(kjt.keys())
        if _has_dim(kjt._lengths):
            shapes[cast(torch.Tensor, kjt._lengths)] = (batch * num_keys,)
        if _has_dim(kjt._offsets):
            shapes[cast(torch.Tensor, kjt._offsets)] = (batch * num_keys + 1,)
    return shapes


def move_to_copy_nodes_to_device(unflattened_module: nn.Module, device: torch.device) -> nn.Module:
    """Point every `_to_copy` node of the module's graph at `device`."""
    graph = cast(torch.fx.Graph, unflattened_module.graph)
    for node in graph.nodes:
        if "_to_copy" in node.name:
            node.kwargs = {
                k: device if isinstance(v, torch.device) else v for k, v in node.kwargs.items()
            }
    return unflattened_module


def _check_graph_node(mod: nn.Module, fqn: str) -> bool:
    """Whether some graph on the path to `fqn` calls the module `fqn`."""
    graph = getattr(mod, "graph", None)
    if graph is None:
        return False
    if any(n.op == "call_module" and n.target == fqn for n in graph.nodes):
        return True
    if "." not in fqn:
        return False
    head, rest = fqn.split(".", maxsplit=1)
    child = getattr(mod, head, None)
    return child is not None and _check_graph_node(child, rest)


def _short_circuit_pytree_ebc_regroup(module: nn.Module) -> nn.Module:
    """Remove the pytree flatten/unflatten between pooled collections and the
    `KTRegroupAsDict` modules that read them (TorchRec's key-order fix)."""
    ebc_fqns: list[str] = []
    regroup_fqns: list[str] = []
    for fqn, m in module.named_modules(remove_duplicate=False):
        if isinstance(m, FeatureProcessedEmbeddingBagCollection):
            ebc_fqns.append(fqn)
        elif isinstance(m, EmbeddingBagCollection | QuantEmbeddingBagCollection):
            if ebc_fqns and fqn.startswith(ebc_fqns[-1]):
                continue  # the collection inside a feature-processed one
            ebc_fqns.append(fqn)
        elif isinstance(m, KTRegroupAsDict):
            if _check_graph_node(module, fqn):
                regroup_fqns.append(fqn)
            else:
                logger.info("KTRegroupAsDict %r is not called by the graph; left alone", fqn)
    if not ebc_fqns or not regroup_fqns:
        return module
    return prune_pytree_flatten_unflatten(module, in_fqns=regroup_fqns, out_fqns=ebc_fqns)


def _find_call(mod: nn.Module, fqn: str) -> tuple[nn.Module, Node, str]:
    """The (graph owner, call_module node, target) that calls `fqn`, searching down its path."""
    for node in cast(torch.fx.Graph, mod.graph).nodes:
        if node.op == "call_module" and node.target == fqn:
            return mod, node, fqn
    if "." not in fqn:
        raise ValueError(f"no graph calls the module {fqn!r}")
    head, rest = fqn.split(".", maxsplit=1)
    return _find_call(getattr(mod, head), rest)


def _only_input(node: Node) -> tuple[Node, bool]:
    """The one input of a call_module node and whether it is positional."""
    if len(node.args) == 1:
        return cast(Node, node.args[0]), True
    if len(node.kwargs) == 1:
        return cast(Node, next(iter(node.kwargs.values()))), False
    raise ValueError(f"expected one input to {node.target!r}, got {node.args} {node.kwargs}")


def _expect(node: Node, target: object, what: str) -> None:
    if node.op != "call_function" or node.target is not target:
        raise ValueError(f"expected {what} before/after the regroup, got {node.format_node()}")


def prune_pytree_flatten_unflatten(
    module: nn.Module, in_fqns: list[str], out_fqns: list[str]
) -> nn.Module:
    """Remove the `tree_unflatten` feeding each module of `in_fqns` (it gets the flat inputs)
    and the `tree_flatten_spec` after each module of `out_fqns` (its output is used as is)."""
    for fqn in in_fqns:
        owner, node, target = _find_call(module, fqn)
        arg, positional = _only_input(node)
        if arg.op == "placeholder":  # the call was partitioned into a submodule: use its caller
            owner, node, _ = _find_call(module, fqn.replace("." + target, ""))
            arg, positional = _only_input(node)
        _expect(arg, operator.getitem, "getitem")
        inner = cast(Node, arg.args[0])
        _expect(inner, operator.getitem, "getitem")
        unflatten = cast(Node, inner.args[0])
        _expect(unflatten, torch.utils._pytree.tree_unflatten, "tree_unflatten")
        flat = unflatten.args[0]
        if positional:
            node.args = (flat,)
        else:
            node.kwargs = {next(iter(node.kwargs)): flat}
        cast(torch.fx.Graph, owner.graph).eliminate_dead_code()
    for fqn in out_fqns:
        owner, node, _ = _find_call(module, fqn)
        users = list(node.users)
        if len(users) != 1:
            raise ValueError(f"expected one user of {fqn!r}, got {users}")
        _expect(users[0], torch.fx._pytree.tree_flatten_spec, "tree_flatten_spec")
        getitems = list(users[0].users)
        if len(getitems) != 1:
            raise ValueError(f"expected one getitem after {fqn!r}'s flatten, got {getitems}")
        _expect(getitems[0], operator.getitem, "getitem")
        getitems[0].replace_all_uses_with(node)
        cast(torch.fx.Graph, owner.graph).eliminate_dead_code()
    return module
