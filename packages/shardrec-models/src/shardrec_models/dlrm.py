"""`DLRM` and its variants: TorchRec's `torchrec.models.dlrm` models (and the experimental
`DLRM_Transformer`), same names and semantics.

DLRM (Naumov et al., https://arxiv.org/abs/1906.00091) projects the dense features into the
embedding space (`dense_arch`), pools one embedding per sparse feature (`sparse_arch`), lets
them interact (`inter_arch`: pairwise dot products; DLRM_DCN: a low-rank cross net) and maps
the result to logits (`over_arch`). The parts are in `shardrec_models.arches`.

State-dict keys are TorchRec's, so a checkpoint moves between the two libraries with
`load_state_dict`: `sparse_arch.embedding_bag_collection.embedding_bags.<table>.weight`,
`dense_arch.model._mlp.<i>._linear.{weight,bias}`, `over_arch.model.0._mlp.<i>._linear...`,
`over_arch.model.1.{weight,bias}`, and for DLRM_DCN `inter_arch.crossnet.{W_kernels,V_kernels,
bias}.<l>`.

No `from __future__ import annotations` here: the models are fx-traced then scripted, as
TorchRec's are, and TorchScript cannot read the string annotations fx would record.
"""

from typing import Protocol

import torch
import torch.fx
from torch import Tensor, nn

from shardrec_embedding import EmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor, KeyedTensor
from shardrec_models.arches import (
    DenseArch,
    InteractionArch,
    InteractionDCNArch,
    InteractionProjectionArch,
    InteractionTransformerArch,
    ModelConfigError,
    OverArch,
    SparseArch,
    is_proxy,
)
from shardrec_models.crossnet import LowRankCrossNet
from shardrec_models.mlp import check_layer_sizes

# DLRM_Transformer is TorchRec's experimental model: served at its own path
# (`torchrec.models.experimental.transformerdlrm`), not with the others.
__all__ = ["DLRM", "DLRM_DCN", "DLRMWrapper", "DLRM_Projection"]

DENSE_PRECISIONS = ("fp32", "bf16")
"""The precisions of `DLRM.set_dense_precision`."""


class _ModelInput(Protocol):
    """What DLRMWrapper reads from its input (TorchRec's test `ModelInput` has these)."""

    @property
    def float_features(self) -> Tensor: ...

    @property
    def idlist_features(self) -> KeyedJaggedTensor: ...

    @property
    def label(self) -> Tensor: ...


def _wrapper_output(
    training: bool, logits: Tensor, label: Tensor
) -> Tensor | tuple[Tensor, Tensor]:
    """A one-input wrapper's result (TorchRec's): in eval mode the logits, in training
    mode `(mean binary_cross_entropy_with_logits(logits, label), logits)`."""
    if not training:
        return logits
    loss = nn.functional.binary_cross_entropy_with_logits(logits.squeeze(-1), label.float())
    return loss, logits


def _device(device: torch.device | str | None) -> torch.device | None:
    return None if device is None else torch.device(device)


class DLRM(nn.Module):
    """DLRM: dense arch, sparse arch over an EmbeddingBagCollection, dot interaction, over arch.

    Args:
        embedding_bag_collection: the tables; at least one, all of the same `embedding_dim` D.
            May live on `meta` (DistributedModelParallel then allocates only each rank's
            shards).
        dense_in_features: width of `dense_features`.
        dense_arch_layer_sizes: the dense MLP's layer sizes; the last one must equal D.
        over_arch_layer_sizes: the over arch's layer sizes; the last one is the number of logits
            (1 for DLRMTrain). Its input width follows from the interaction and is not listed.
        dense_device: where the dense parts live; `"meta"` allocates nothing and
            DistributedModelParallel (or `to_empty()` + each module's `reset_parameters()`)
            initializes them.

    Initialization is TorchRec's: `nn.Linear`'s default for every layer.

    Dense precision (a shardrec option, TorchRec has none): `set_dense_precision("bf16")` runs
    the dense arch, the interaction and the over arch under `torch.autocast(bfloat16)` on the
    input's device: matrix products in bfloat16 (float32 accumulation), parameters, their
    gradients and the optimizer state stay float32 (the master weights), the embeddings are
    looked up and pooled in their own dtype, and the logits come back as float32. Eager only
    (fx tracing and TorchScript see the float32 graph). Default "fp32": unchanged numerics.

    forward: `dense_features: (B, dense_in_features)`, `sparse_features: KeyedJaggedTensor`
    with every feature the tables read, stride B -> logits `(B, over_arch_layer_sizes[-1])`.
    """

    def __init__(
        self,
        embedding_bag_collection: EmbeddingBagCollection,
        dense_in_features: int,
        dense_arch_layer_sizes: list[int],
        over_arch_layer_sizes: list[int],
        dense_device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        dense_sizes = check_layer_sizes("dense_arch_layer_sizes", dense_arch_layer_sizes)
        over_sizes = check_layer_sizes("over_arch_layer_sizes", over_arch_layer_sizes)
        device = _device(dense_device)
        self.sparse_arch = SparseArch(embedding_bag_collection)
        dim, num_features = self.sparse_arch.D, self.sparse_arch.F
        if dense_sizes[-1] != dim:
            raise ModelConfigError(
                f"dense_arch_layer_sizes[-1] is {dense_sizes[-1]}, but the tables' "
                f"embedding_dim is {dim}: the dense arch's output takes part in the dot products "
                f"with the embeddings, so end dense_arch_layer_sizes with {dim}"
            )
        self.dense_arch = DenseArch(dense_in_features, dense_sizes, device=device)
        self.inter_arch: nn.Module = InteractionArch(num_features)
        over_in = dim + num_features * (num_features + 1) // 2
        self.over_arch = OverArch(over_in, over_sizes, device=device)
        self._cuda_graph_enabled = False
        self._dense_precision = "fp32"

    def _replace_interaction(
        self,
        inter_arch: nn.Module,
        over_in_features: int,
        over_arch_layer_sizes: list[int],
        device: torch.device | None,
    ) -> None:
        """A variant's interaction and the over arch over its output width, in place of the
        dot-product ones. The base class builds those first, as TorchRec's does, so that one
        seed draws the same weights in both libraries."""
        self.inter_arch = inter_arch if device is None else inter_arch.to(device)
        self.over_arch = OverArch(over_in_features, list(over_arch_layer_sizes), device=device)

    def forward(self, dense_features: Tensor, sparse_features: KeyedJaggedTensor) -> Tensor:
        # The lookup is started first: a sharded collection returns while its output
        # all-to-all is in flight, and the dense arch computes in the meantime.
        pooled = self.sparse_arch.embedding_bag_collection(sparse_features)
        if self._dense_precision == "bf16" and not torch._jit_internal.is_scripting():
            return self._bf16_dense(dense_features, pooled)
        return self._dense(dense_features, pooled)

    def _dense(self, dense_features: Tensor, pooled: KeyedTensor) -> Tensor:
        """Everything after the lookup: dense arch, interaction, over arch -> logits."""
        embedded_dense = self.dense_arch(dense_features)
        embedded_sparse = self.sparse_arch.stack(pooled)
        # fx traces with Proxies (no sizes to compare); TorchScript drops the first branch.
        if not torch._jit_internal.is_scripting():
            if not is_proxy(embedded_dense):
                _check_batch(embedded_dense.shape[0], embedded_sparse.shape[0])
        else:
            _check_batch(embedded_dense.shape[0], embedded_sparse.shape[0])
        interacted = self.inter_arch(embedded_dense, embedded_sparse)
        logits: Tensor = self.over_arch(interacted)
        return logits

    @property
    def dense_precision(self) -> str:
        """ "fp32" (default) or "bf16" (`set_dense_precision`)."""
        return self._dense_precision

    @torch.jit.unused
    def set_dense_precision(self, precision: str) -> None:
        """Compute the dense part in "bf16" (autocast, float32 master weights) or "fp32"."""
        if precision not in DENSE_PRECISIONS:
            raise ValueError(
                f"dense precision {precision!r} is not one of {', '.join(DENSE_PRECISIONS)}"
            )
        self._dense_precision = precision

    @torch.jit.unused
    def _bf16_dense(self, dense_features: Tensor, pooled: KeyedTensor) -> Tensor:
        with torch.autocast(device_type=dense_features.device.type, dtype=torch.bfloat16):
            logits = self._dense(dense_features, pooled)
        return logits.float()

    @torch.jit.unused
    def compile_dense_path(self, compile_mode: str = "reduce-overhead") -> None:
        """Wrap `dense_arch`, `inter_arch` and `over_arch` in `torch.compile(mode=...)`
        (TorchRec's method; on CUDA the default mode captures CUDA graphs). The sparse arch
        stays eager: its input shapes change every batch. Idempotent."""
        if self._cuda_graph_enabled:
            return
        self.dense_arch = torch.compile(self.dense_arch, mode=compile_mode)  # type: ignore[assignment]  # a compiled wrapper of the module
        self.inter_arch = torch.compile(self.inter_arch, mode=compile_mode)  # type: ignore[assignment]  # a compiled wrapper of the module
        self.over_arch = torch.compile(self.over_arch, mode=compile_mode)  # type: ignore[assignment]  # a compiled wrapper of the module
        self._cuda_graph_enabled = True


def _check_batch(dense_rows: int, sparse_rows: int) -> None:
    if dense_rows != sparse_rows:
        raise ValueError(
            "dense_features has "
            + str(dense_rows)
            + " rows but sparse_features has batch size "
            + str(sparse_rows)
            + "; both must describe the same samples"
        )


class DLRM_DCN(DLRM):
    """DLRM whose interaction is a low-rank cross net (DCN-v2) over `[dense, f_1, ..., f_F]`.

    Args: those of `DLRM`, plus
        dcn_num_layers: cross layers (>= 0).
        dcn_low_rank_dim: rank of each cross layer's weight (>= 1).

    The over arch reads the cross net's output, of width `(F + 1) * D`. As in TorchRec, the
    cross net's kernels start Xavier-normal and its biases at zero.
    """

    def __init__(
        self,
        embedding_bag_collection: EmbeddingBagCollection,
        dense_in_features: int,
        dense_arch_layer_sizes: list[int],
        over_arch_layer_sizes: list[int],
        dcn_num_layers: int,
        dcn_low_rank_dim: int,
        dense_device: torch.device | str | None = None,
    ) -> None:
        super().__init__(
            embedding_bag_collection,
            dense_in_features,
            dense_arch_layer_sizes,
            over_arch_layer_sizes,
            dense_device,
        )
        device = _device(dense_device)
        dim, num_features = self.sparse_arch.D, self.sparse_arch.F
        width = (num_features + 1) * dim
        crossnet = LowRankCrossNet(width, dcn_num_layers, dcn_low_rank_dim, device=device)
        self._replace_interaction(
            InteractionDCNArch(num_features, crossnet), width, over_arch_layer_sizes, device
        )


class DLRM_Projection(DLRM):
    """DLRM whose interaction is `InteractionProjectionArch` (TorchRec's DLRM_Projection).

    Args: those of `DLRM`, plus
        interaction_branch1_layer_sizes, interaction_branch2_layer_sizes: the layer sizes of
            the two projection `DenseArch`s over `[dense, f_1, ..., f_F]` (width
            `(F + 1) * D`); each must end with a multiple of D, F1 * D and F2 * D.

    The over arch reads `D + F1 * F2` features.
    """

    def __init__(
        self,
        embedding_bag_collection: EmbeddingBagCollection,
        dense_in_features: int,
        dense_arch_layer_sizes: list[int],
        over_arch_layer_sizes: list[int],
        interaction_branch1_layer_sizes: list[int],
        interaction_branch2_layer_sizes: list[int],
        dense_device: torch.device | str | None = None,
    ) -> None:
        super().__init__(
            embedding_bag_collection,
            dense_in_features,
            dense_arch_layer_sizes,
            over_arch_layer_sizes,
            dense_device,
        )
        device = _device(dense_device)
        dim, num_features = self.sparse_arch.D, self.sparse_arch.F
        width = (num_features + 1) * dim
        projected = []
        branches = []
        for branch, sizes in (
            (1, interaction_branch1_layer_sizes),
            (2, interaction_branch2_layer_sizes),
        ):
            name = f"interaction_branch{branch}_layer_sizes"
            checked = check_layer_sizes(name, sizes)
            if checked[-1] % dim:
                raise ValueError(
                    f"{name} ends with {checked[-1]}, which is not a multiple of the tables' "
                    f"embedding_dim {dim}: the projection is read as (B, F{branch}, {dim})"
                )
            projected.append(checked[-1] // dim)
            branches.append(DenseArch(width, checked, device=device))
        self._replace_interaction(
            InteractionProjectionArch(num_features, branches[0], branches[1]),
            dim + projected[0] * projected[1],
            over_arch_layer_sizes,
            device,
        )


class DLRM_Transformer(DLRM):
    """DLRM with `InteractionTransformerArch` as its interaction (module docstring).

    Args: those of `DLRM`, plus
        nhead: attention heads (must divide the tables' embedding dim).
        ntransformer_layers: encoder layers.

    The over arch reads the encoder's flattened output, of width `(F + 1) * D`.
    """

    def __init__(
        self,
        embedding_bag_collection: EmbeddingBagCollection,
        dense_in_features: int,
        dense_arch_layer_sizes: list[int],
        over_arch_layer_sizes: list[int],
        nhead: int = 8,
        ntransformer_layers: int = 4,
        dense_device: torch.device | str | None = None,
    ) -> None:
        super().__init__(
            embedding_bag_collection,
            dense_in_features,
            dense_arch_layer_sizes,
            over_arch_layer_sizes,
            dense_device,
        )
        device = _device(dense_device)
        dim, num_features = self.sparse_arch.D, self.sparse_arch.F
        self._replace_interaction(
            InteractionTransformerArch(num_features, dim, nhead, ntransformer_layers),
            (num_features + 1) * dim,
            over_arch_layer_sizes,
            device,
        )


class DLRMWrapper(DLRM):
    """A `DLRM` whose forward takes one model input (TorchRec's DLRMWrapper): any object with
    `float_features` `(B, dense_in_features)`, `idlist_features` (KJT) and `label` `(B,)`.

    forward: in training mode `(loss, logits)` with the mean binary cross entropy of the
    logits against `label`; in eval mode the logits `(B, over_arch_layer_sizes[-1])`.
    """

    def forward(  # type: ignore[override]  # TorchRec's signature: one model input
        self, model_input: "_ModelInput"
    ) -> Tensor | tuple[Tensor, Tensor]:
        logits = super().forward(model_input.float_features, model_input.idlist_features)
        return _wrapper_output(self.training, logits, model_input.label)
