"""QuantEmbeddingCollection (sequence) with dynamic (raw-id) tables: against the float
dynamic EmbeddingCollection in evaluation (FP16 / INT8 / INT4), scripted, reloaded where
shardrec is not importable, and its id maps in the state_dict."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _quant_cases import qconfig

from shardrec_embedding import (
    DynamicTableConfig,
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
    PoolingType,
    QuantEmbeddingCollection,
    quantize_inference_model,
)
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, script_fields
from shardrec_testing import assert_scripted_reloads_without_shardrec

CAPACITY = 40
DIM = 8


def _tables(unknown: str) -> list[EmbeddingConfig]:
    return [
        EmbeddingConfig(
            name="users",
            num_embeddings=CAPACITY,
            embedding_dim=DIM,
            feature_names=["user"],
            dynamic=DynamicTableConfig(eviction="LRU", unknown_id=unknown),  # type: ignore[arg-type]
        ),
        EmbeddingConfig(name="static", num_embeddings=10, embedding_dim=DIM, feature_names=["s"]),
        EmbeddingConfig(
            name="pairs",
            num_embeddings=CAPACITY,
            embedding_dim=DIM,
            feature_names=["pair", "pair2"],
            dynamic=DynamicTableConfig(eviction="NONE", unknown_id=unknown),  # type: ignore[arg-type]
        ),
    ]


def _batch(gen: torch.Generator, batch: int, pool: torch.Tensor) -> KeyedJaggedTensor:
    """Keys user, s, pair, pair2; empty bags included (lengths 0..3)."""
    lengths = torch.randint(0, 4, (4 * batch,), generator=gen)
    n = [int(x) for x in lengths.view(4, batch).sum(1)]
    raw = [pool[torch.randint(0, pool.numel(), (k,), generator=gen)] for k in n]
    raw[1] = torch.randint(0, 10, (n[1],), generator=gen)
    return KeyedJaggedTensor(
        keys=["user", "s", "pair", "pair2"], values=torch.cat(raw), lengths=lengths
    )


def _trained(unknown: str) -> tuple[EmbeddingCollection, torch.Tensor]:
    """A float collection whose dynamic tables saw (and evicted or rejected) raw ids."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    pool = torch.cat(
        [
            torch.tensor([-(2**63), 2**63 - 1, -1, 0, 7]),
            torch.randint(-(2**62), 2**62, (70,), generator=gen),
        ]
    )
    ec = EmbeddingCollection(_tables(unknown))
    for _ in range(6):
        ec(_batch(gen, 16, pool))  # training mode: admits, evicts (users), rejects (pairs)
    ec.dynamic_tables.table("users").default_row.copy_(torch.linspace(-1, 1, DIM))
    ec.dynamic_tables.table("pairs").default_row.copy_(torch.linspace(2, 3, DIM))
    ec.eval()
    stats = ec.dynamic_tables.stats()
    assert stats["users"]["evictions"] > 0 and stats["pairs"]["rejections"] > 0
    return ec, pool


def _assert_close(
    got: dict[str, JaggedTensor], want: dict[str, JaggedTensor], atol: float, rtol: float
) -> None:
    assert list(got) == list(want)
    for name, jt in want.items():
        assert torch.equal(got[name].lengths(), jt.lengths())
        torch.testing.assert_close(got[name].values(), jt.values(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("unknown", ["ZERO", "DEFAULT_ROW"])
def test_fp16_matches_float_dynamic_module(unknown: str) -> None:
    ec, pool = _trained(unknown)
    ec.qconfig = qconfig(torch.float16)
    q = QuantEmbeddingCollection.from_float(ec)
    scripted = torch.jit.script(q)
    gen = torch.Generator().manual_seed(9)
    unknown_before = ec.dynamic_tables.stats()["users"]["unknown_reads"]
    for _ in range(3):  # known and unknown raw ids (the pool holds more ids than slots)
        kjt = _batch(gen, 12, pool)
        want = ec(kjt)
        _assert_close(q(kjt), want, atol=2e-3, rtol=1e-3)
        _assert_close(scripted(kjt), want, atol=2e-3, rtol=1e-3)
    assert ec.dynamic_tables.stats()["users"]["unknown_reads"] > unknown_before


@pytest.mark.parametrize("dtype", [torch.int8, torch.quint4x2])
def test_int8_int4_close_to_float(dtype: torch.dtype) -> None:
    ec, pool = _trained("DEFAULT_ROW")
    ec.qconfig = qconfig(dtype)
    q = QuantEmbeddingCollection.from_float(ec)
    kjt = _batch(torch.Generator().manual_seed(4), 16, pool)
    atol = 0.05 if dtype == torch.int8 else 0.2
    _assert_close(q(kjt), ec(kjt), atol=atol, rtol=0)


def test_unknown_ids_read_the_default_row_exactly() -> None:
    ec, _ = _trained("DEFAULT_ROW")
    q = quantize_inference_model(ec, torch.float16)
    assert isinstance(q, QuantEmbeddingCollection)
    never = torch.tensor([123456789, -987654321, 5])  # never seen
    kjt = KeyedJaggedTensor(
        keys=["user", "s", "pair", "pair2"],
        values=torch.cat([never[:2], torch.tensor([3]), never[2:]]),
        lengths=torch.tensor([2, 1, 1, 0]),
    )
    out = q(kjt)
    users = torch.linspace(-1, 1, DIM).half().float()
    assert torch.equal(out["user"].values(), users.expand(2, DIM))
    assert torch.equal(out["pair"].values(), torch.linspace(2, 3, DIM).half().float()[None])
    assert out["pair2"].values().shape == (0, DIM)


def test_need_indices_returns_the_raw_ids() -> None:
    ec, pool = _trained("ZERO")
    ec._need_indices = True  # as built with need_indices=True
    ec.qconfig = qconfig(torch.int8)
    q = QuantEmbeddingCollection.from_float(ec)
    kjt = _batch(torch.Generator().manual_seed(2), 8, pool)
    got, want = q(kjt), ec(kjt)
    for name in ("user", "pair"):
        ids = got[name].weights()
        assert torch.equal(ids, want[name].weights())
        assert torch.equal(ids, kjt[name].values())  # raw, not slots


class _Values(torch.nn.Module):
    """The artifact returns the per-feature rows (a dict of tensors)."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, kjt: KeyedJaggedTensor) -> dict[str, torch.Tensor]:
        return {k: v.values() for k, v in self.inner(kjt).items()}


def test_scripted_artifact_maps_raw_ids_without_shardrec(tmp_path: Path) -> None:
    ec, pool = _trained("DEFAULT_ROW")
    q = quantize_inference_model(ec, torch.int8)
    kjt = _batch(torch.Generator().manual_seed(5), 16, pool)
    scripted = torch.jit.script(_Values(q))
    expected = {k: v.values() for k, v in q(kjt).items()}
    got = scripted(kjt)
    assert all(torch.equal(got[k], v) for k, v in expected.items())
    assert_scripted_reloads_without_shardrec(scripted, script_fields(kjt), expected, tmp_path)


def test_state_dict_carries_the_id_maps() -> None:
    ec, pool = _trained("DEFAULT_ROW")
    ec.qconfig = qconfig(torch.int8)
    q = QuantEmbeddingCollection.from_float(ec)
    kjt = _batch(torch.Generator().manual_seed(6), 16, pool)
    want = q(kjt)
    fresh = QuantEmbeddingCollection(q.embedding_configs())
    fresh.load_state_dict(q.state_dict())
    _assert_close(fresh(kjt), want, atol=0, rtol=0)
    other = QuantEmbeddingCollection(q.embedding_configs())
    other.load_state_dict(q.state_dict())
    tables = ec.dynamic_tables
    other.load_id_maps(
        {"users": tables.table("users").items(), "pairs": tables.table("pairs").items()}
    )
    _assert_close(other(kjt), want, atol=0, rtol=0)


def test_load_id_maps_refused_without_dynamic_tables() -> None:
    q = QuantEmbeddingCollection(
        [EmbeddingConfig(name="t", num_embeddings=4, embedding_dim=4, feature_names=["f"])]
    )
    with pytest.raises(ValueError, match="no table is dynamic"):
        q.load_id_maps({})


def test_float32_inference_copy_scripts_the_float_modules_exactly() -> None:
    """The route the float collections' script refusal names: an FP32 inference copy."""
    ec, pool = _trained("DEFAULT_ROW")
    with pytest.raises(NotImplementedError, match="quantize_inference_model"):
        torch.jit.script(ec)
    scripted = torch.jit.script(quantize_inference_model(ec, torch.float32))
    kjt = _batch(torch.Generator().manual_seed(3), 16, pool)
    want, got = ec(kjt), scripted(kjt)
    assert list(got) == list(want)
    assert all(torch.equal(got[k].values(), want[k].values()) for k in want)
    bag = EmbeddingBagCollection(
        [
            EmbeddingBagConfig(
                name="users",
                num_embeddings=CAPACITY,
                embedding_dim=DIM,
                feature_names=["user"],
                pooling=PoolingType.MEAN,
                dynamic=DynamicTableConfig(unknown_id="DEFAULT_ROW"),  # type: ignore[arg-type]
            )
        ]
    )
    gen = torch.Generator().manual_seed(4)
    for _ in range(3):
        bag(KeyedJaggedTensor(keys=["user"], values=pool[:20], lengths=torch.tensor([5, 0, 15])))
    bag.dynamic_tables.table("users").default_row.copy_(torch.linspace(-1, 1, DIM))
    bag.eval()
    with pytest.raises(NotImplementedError, match="quantize_inference_model"):
        torch.jit.script(bag)
    scripted_bag = torch.jit.script(quantize_inference_model(bag, torch.float32))
    ids = pool[torch.randint(0, pool.numel(), (30,), generator=gen)]  # some never admitted
    kjt = KeyedJaggedTensor(keys=["user"], values=ids, lengths=torch.tensor([10, 0, 20]))
    assert torch.equal(scripted_bag(kjt).values(), bag(kjt).values())
