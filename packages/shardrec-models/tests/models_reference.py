"""Plain-torch references for the DLRM tests, and the inputs they run on.

The reference reads a model's weights by their state_dict names and recomputes the logits with
naive loops (one bag at a time, one feature pair at a time) and explicit matmuls, so it shares
no code with `shardrec_models`. Given leaf tensors it also yields reference gradients.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing.random_ids import random_dlrm_inputs, random_ids

# (table name, rows, features it reads)
TableSpec = tuple[str, int, list[str]]


@dataclasses.dataclass
class Batch:
    """A BatchLike with `to`, as the train pipeline needs."""

    dense_features: Tensor  # (B, dense_in)
    sparse_features: KeyedJaggedTensor
    labels: Tensor  # (B,)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        return Batch(
            self.dense_features.to(device, non_blocking=non_blocking),
            self.sparse_features.to(device, non_blocking=non_blocking),
            self.labels.to(device, non_blocking=non_blocking),
        )


def make_ebc(
    tables: Sequence[TableSpec],
    dim: int,
    *,
    pooling: PoolingType = PoolingType.SUM,
    device: str | None = None,
) -> EmbeddingBagCollection:
    return EmbeddingBagCollection(
        [
            EmbeddingBagConfig(
                name=n, num_embeddings=r, embedding_dim=dim, feature_names=f, pooling=pooling
            )
            for n, r, f in tables
        ],
        device=device,
    )


def feature_limits(tables: Sequence[TableSpec]) -> dict[str, int]:
    """Per feature, the smallest table reading it: ids below that are valid everywhere."""
    limits: dict[str, int] = {}
    for _, rows, features in tables:
        for f in features:
            limits[f] = min(rows, limits.get(f, rows))
    return limits


def make_kjt(
    limits: Mapping[str, int], batch: int, gen: torch.Generator, max_len: int = 3
) -> KeyedJaggedTensor:
    """Random bags (some empty) of valid ids for every feature of `limits`, stride `batch`."""
    lengths, values = random_ids(limits, batch, max_len, gen)
    return KeyedJaggedTensor(list(limits), values, lengths=lengths, stride=batch)


def make_batch(limits: Mapping[str, int], dense_in: int, batch: int, gen: torch.Generator) -> Batch:
    dense, lengths, values, labels = random_dlrm_inputs(limits, dense_in, batch, gen)
    kjt = KeyedJaggedTensor(list(limits), values, lengths=lengths, stride=batch)
    return Batch(dense, kjt, labels)


def concat(batches: Sequence[Batch]) -> Batch:
    """The batches one after the other (the unsharded reference's input)."""
    dicts = [b.sparse_features.to_dict() for b in batches]
    keys = batches[0].sparse_features.keys()
    kjt = KeyedJaggedTensor(
        keys,
        torch.cat([d[f].values() for f in keys for d in dicts]),
        lengths=torch.cat([d[f].lengths() for f in keys for d in dicts]),
        stride=sum(b.labels.numel() for b in batches),
    )
    return Batch(
        torch.cat([b.dense_features for b in batches]),
        kjt,
        torch.cat([b.labels for b in batches]),
    )


def randomize_(model: nn.Module, gen: torch.Generator, scale: float = 0.5) -> None:
    """Every parameter drawn from N(0, scale^2): biases and cross-net biases nonzero too."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * scale)


def leaf_params(model: nn.Module) -> dict[str, Tensor]:
    """The model's state_dict as fresh leaf tensors requiring grad."""
    return {
        k: v.detach().clone().requires_grad_(v.is_floating_point())
        for k, v in model.state_dict().items()
    }


def ref_pooled(
    params: Mapping[str, Tensor],
    tables: Sequence[TableSpec],
    kjt: KeyedJaggedTensor,
    prefix: str,
    pooling: PoolingType = PoolingType.SUM,
) -> list[Tensor]:
    """One `(B, D)` tensor per (table, feature), table order then feature order."""
    by_feature = kjt.to_dict()
    out: list[Tensor] = []
    for name, _, features in tables:
        weight = params[f"{prefix}embedding_bags.{name}.weight"]
        for f in features:
            jt = by_feature[f]
            bags: list[Tensor] = []
            start = 0
            for n in jt.lengths().tolist():
                ids = jt.values()[start : start + n].tolist()
                start += n
                acc = weight.new_zeros(weight.shape[1])
                for i in ids:
                    acc = acc + weight[i]
                if pooling is PoolingType.MEAN and ids:
                    acc = acc / len(ids)
                bags.append(acc)
            out.append(torch.stack(bags) if bags else weight.new_zeros(0, weight.shape[1]))
    return out


def ref_mlp(x: Tensor, params: Mapping[str, Tensor], prefix: str, layers: int) -> Tensor:
    """`layers` x (x @ W.T + b, then ReLU) over `<prefix><i>._linear.{weight,bias}`."""
    for i in range(layers):
        w, b = params[f"{prefix}{i}._linear.weight"], params[f"{prefix}{i}._linear.bias"]
        x = torch.relu(x @ w.t() + b)
    return x


def ref_dlrm(
    params: Mapping[str, Tensor],
    tables: Sequence[TableSpec],
    batch: Batch,
    *,
    dense_layers: int,
    over_layers: int,
    dcn_layers: int | None = None,
    pooling: PoolingType = PoolingType.SUM,
    prefix: str = "",
) -> Tensor:
    """Logits `(B, out)` of DLRM (`dcn_layers=None`) or DLRM_DCN, from state_dict names."""
    dense = ref_mlp(batch.dense_features, params, f"{prefix}dense_arch.model._mlp.", dense_layers)
    pooled = ref_pooled(
        params,
        tables,
        batch.sparse_features,
        f"{prefix}sparse_arch.embedding_bag_collection.",
        pooling,
    )
    vectors = [dense, *pooled]
    if dcn_layers is None:
        pairs = [
            (vectors[i] * vectors[j]).sum(1)
            for i in range(len(vectors))
            for j in range(i + 1, len(vectors))
        ]
        inter = torch.cat([dense, torch.stack(pairs, 1)], 1)
    else:
        x0 = torch.cat(vectors, 1)
        inter = x0
        for layer in range(dcn_layers):
            w = params[f"{prefix}inter_arch.crossnet.W_kernels.{layer}"]
            v = params[f"{prefix}inter_arch.crossnet.V_kernels.{layer}"]
            b = params[f"{prefix}inter_arch.crossnet.bias.{layer}"]
            inter = x0 * ((inter @ v.t()) @ w.t() + b) + inter
    hidden = ref_mlp(inter, params, f"{prefix}over_arch.model.0._mlp.", over_layers - 1)
    w, b = params[f"{prefix}over_arch.model.1.weight"], params[f"{prefix}over_arch.model.1.bias"]
    return hidden @ w.t() + b
