"""FusedEmbeddingBagCollection against an unfused EmbeddingBagCollection plus a reference
optimizer (dense torch.optim where one exists, else shardrec_optim's row-sparse formula)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

from shardrec_embedding.configs import DataType, EmbeddingBagConfig, PoolingType
from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.fused import FusedEmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import (
    EmbOptimType,
    FusedOptimSpec,
    WarmupOptimizer,
    WarmupPolicy,
    WarmupStage,
    in_backward_optimizer_filter,
    init_state,
    pooled,
    sparse_update,
)


def _tables(mean: bool = False) -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(
            name="t1", num_embeddings=10, embedding_dim=4, feature_names=["f1", "f3"]
        ),
        EmbeddingBagConfig(
            name="t2",
            num_embeddings=7,
            embedding_dim=4,
            feature_names=["f2"],
            pooling=PoolingType.MEAN if mean else PoolingType.SUM,
        ),
        EmbeddingBagConfig(name="t3", num_embeddings=5, embedding_dim=8, feature_names=["f4"]),
    ]


FEATURE_ROWS = {"f1": 10, "f3": 10, "f2": 7, "f4": 5}
FEATURE_TABLE = {"f1": "t1", "f3": "t1", "f2": "t2", "f4": "t3"}


def _batch(gen: torch.Generator, batch: int, weighted: bool, dup: bool) -> KeyedJaggedTensor:
    keys = ["f4", "f1", "f2", "f3"]  # not table order on purpose
    lengths = torch.randint(0, 6, (len(keys) * batch,), generator=gen)
    lengths[::3] = 0  # empty bags
    values = []
    for i, k in enumerate(keys):
        n = int(lengths[i * batch : (i + 1) * batch].sum())
        high = 2 if dup else FEATURE_ROWS[k]  # dup: only ids 0 and 1, many repeats
        values.append(torch.randint(0, high, (n,), generator=gen))
    vals = torch.cat(values)
    weights = torch.rand(vals.numel(), generator=gen) if weighted else None
    return KeyedJaggedTensor(keys=keys, values=vals, lengths=lengths, weights=weights)


def _touched(kjt: KeyedJaggedTensor) -> dict[str, torch.Tensor]:
    out: dict[str, list[torch.Tensor]] = {}
    for k, ids in zip(kjt.keys(), kjt.values().split(kjt.length_per_key()), strict=True):
        out.setdefault(FEATURE_TABLE[k], []).append(ids)
    return {t: torch.unique(torch.cat(v)) for t, v in out.items()}


class _Reference:
    """Unfused EBC trained by `sparse_update` on its dense gradients' touched rows."""

    def __init__(self, ebc: EmbeddingBagCollection, spec: FusedOptimSpec) -> None:
        self.ebc, self.spec, self.t = ebc, spec, 0
        self.state = {
            n: init_state(spec.optimizer, *m.weight.shape) for n, m in ebc.embedding_bags.items()
        }

    def step(self, kjt: KeyedJaggedTensor, loss_fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.t += 1
        self.ebc.zero_grad()
        loss_fn(self.ebc(kjt).values()).backward()
        touched = _touched(kjt)
        with torch.no_grad():
            for name, m in self.ebc.embedding_bags.items():
                rows = touched.get(name, torch.empty(0, dtype=torch.long))
                assert m.weight.grad is not None
                grads = m.weight.grad.index_select(0, rows)
                sparse_update(self.spec, m.weight, self.state[name], rows, grads, step=self.t)


SPECS = [
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.1),
    FusedOptimSpec(optimizer=EmbOptimType.SGD, learning_rate=0.1),
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_ADAGRAD, learning_rate=0.1),
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1, eps=1e-3),
    FusedOptimSpec(
        optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD,
        learning_rate=0.1,
        weight_decay=0.01,
        weight_decay_mode="decouple",  # type: ignore[arg-type]  # plain string accepted
    ),
    FusedOptimSpec(optimizer=EmbOptimType.ADAM, learning_rate=0.02, weight_decay=0.01),
    FusedOptimSpec(optimizer=EmbOptimType.PARTIAL_ROWWISE_ADAM, learning_rate=0.02),
    FusedOptimSpec(optimizer=EmbOptimType.LAMB, learning_rate=0.02),
    FusedOptimSpec(optimizer=EmbOptimType.PARTIAL_ROWWISE_LAMB, learning_rate=0.02),
    FusedOptimSpec(optimizer=EmbOptimType.LARS_SGD, learning_rate=0.5, eta=0.1),
]


def _loss(out: torch.Tensor) -> torch.Tensor:
    target = torch.linspace(-1, 1, out.shape[1])
    return (out - target).pow(2).sum()


def _pair(
    spec: FusedOptimSpec, *, weighted: bool = False, mean: bool = False
) -> tuple[FusedEmbeddingBagCollection, EmbeddingBagCollection]:
    torch.manual_seed(0)
    fused = FusedEmbeddingBagCollection(_tables(mean), spec, is_weighted=weighted)
    ref = EmbeddingBagCollection(_tables(mean), is_weighted=weighted)
    ref.load_state_dict(fused.state_dict())
    return fused, ref


def _assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], rtol=1e-5, atol=1e-6, msg=k)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.optimizer.name)
@pytest.mark.parametrize(("weighted", "dup", "mean"), [(False, False, True), (True, True, False)])
def test_fused_steps_equal_unfused_reference(
    spec: FusedOptimSpec, weighted: bool, dup: bool, mean: bool
) -> None:
    fused, ref_ebc = _pair(spec, weighted=weighted, mean=mean)
    ref = _Reference(ref_ebc, spec)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        kjt = _batch(gen, 6, weighted, dup)
        out = fused(kjt)
        torch.testing.assert_close(out.values(), ref_ebc(kjt).values())
        _loss(out.values()).backward()
        ref.step(kjt, _loss)
        _assert_same_weights(fused, ref_ebc)
    assert all(p.grad is None for p in fused.parameters())


@pytest.mark.parametrize(
    ("torch_cls", "kwargs"),
    [
        (torch.optim.SGD, {"lr": 0.2}),
        (torch.optim.Adagrad, {"lr": 0.2}),
    ],
)
def test_fused_equals_dense_torch_optim(
    torch_cls: type[torch.optim.Optimizer], kwargs: dict[str, float]
) -> None:
    torch.manual_seed(0)
    fused = FusedEmbeddingBagCollection(_tables(), torch_cls, kwargs)
    ref = EmbeddingBagCollection(_tables())
    ref.load_state_dict(fused.state_dict())
    opt = torch_cls(ref.parameters(), **kwargs)
    gen = torch.Generator().manual_seed(2)
    for _ in range(4):
        kjt = _batch(gen, 5, weighted=False, dup=True)
        _loss(fused(kjt).values()).backward()
        opt.zero_grad()
        _loss(ref(kjt).values()).backward()
        opt.step()
    _assert_same_weights(fused, ref)


def test_adam_all_rows_touched_equals_dense_torch_adam() -> None:
    tables = [EmbeddingBagConfig(name="t", num_embeddings=3, embedding_dim=4, feature_names=["f"])]
    torch.manual_seed(0)
    fused = FusedEmbeddingBagCollection(tables, torch.optim.Adam, {"lr": 0.01})
    ref = EmbeddingBagCollection(tables)
    ref.load_state_dict(fused.state_dict())
    opt = torch.optim.Adam(ref.parameters(), lr=0.01)
    kjt = KeyedJaggedTensor(
        keys=["f"], values=torch.tensor([0, 1, 2, 2]), lengths=torch.tensor([3, 1])
    )
    for _ in range(3):
        _loss(fused(kjt).values()).backward()
        opt.zero_grad()
        _loss(ref(kjt).values()).backward()
        opt.step()
    _assert_same_weights(fused, ref)


@pytest.mark.parametrize(
    "optimizer",
    # ADAM always takes the torch path, whose chunking is under test; rowwise Adagrad does
    # too where fbgemm is not installed.
    [EmbOptimType.EXACT_ROWWISE_ADAGRAD, EmbOptimType.ADAM],
)
@pytest.mark.parametrize("dup", [False, True])
def test_many_chunks_equal_one_chunk(
    monkeypatch: pytest.MonkeyPatch, optimizer: EmbOptimType, dup: bool
) -> None:
    spec = FusedOptimSpec(optimizer=optimizer, learning_rate=0.1)
    a, _ = _pair(spec, weighted=True)
    b = copy.deepcopy(a)
    gen = torch.Generator().manual_seed(3)
    kjt = _batch(gen, 8, weighted=True, dup=dup)
    _loss(a(kjt).values()).backward()
    monkeypatch.setattr(pooled, "CHUNK_BYTES", 16)  # one or two rows per chunk
    _loss(b(kjt).values()).backward()
    _assert_same_weights(a, b)


def test_per_sample_weight_gradient_matches_unfused() -> None:
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.1)
    fused, ref = _pair(spec, weighted=True)
    gen = torch.Generator().manual_seed(4)
    kjt = _batch(gen, 5, weighted=True, dup=True)
    w1 = kjt.weights().clone().requires_grad_()
    w2 = kjt.weights().clone().requires_grad_()
    k1 = KeyedJaggedTensor(keys=kjt.keys(), values=kjt.values(), lengths=kjt.lengths(), weights=w1)
    k2 = KeyedJaggedTensor(keys=kjt.keys(), values=kjt.values(), lengths=kjt.lengths(), weights=w2)
    _loss(fused(k1).values()).backward()
    _loss(ref(k2).values()).backward()
    assert w1.grad is not None and w2.grad is not None
    torch.testing.assert_close(w1.grad, w2.grad)


def _train(m: FusedEmbeddingBagCollection, seed: int, steps: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        _loss(m(_batch(gen, 6, weighted=False, dup=False)).values()).backward()


@pytest.mark.parametrize(
    "spec",
    [SPECS[3], SPECS[5]],
    ids=lambda s: s.optimizer.name,
)
def test_state_dict_save_load_mid_training_continues_identically(spec: FusedOptimSpec) -> None:
    torch.manual_seed(0)
    a = FusedEmbeddingBagCollection(_tables(), spec)
    _train(a, seed=5, steps=2)
    model_sd = copy.deepcopy(a.state_dict())
    optim_sd = copy.deepcopy(a.fused_optimizer.state_dict())
    _train(a, seed=6, steps=2)

    torch.manual_seed(123)  # different init: everything must come from the checkpoint
    b = FusedEmbeddingBagCollection(_tables(), spec)
    b.load_state_dict(model_sd)
    b.fused_optimizer.load_state_dict(optim_sd)
    _train(b, seed=6, steps=2)
    _assert_same_weights(a, b)
    sa, sb = a.fused_optimizer.state_dict()["state"], b.fused_optimizer.state_dict()["state"]
    assert isinstance(sa, dict) and isinstance(sb, dict)
    for key in sa:
        for name in sa[key]:
            torch.testing.assert_close(sa[key][name], sb[key][name])


def test_fused_optimizer_names_state_like_torchrec() -> None:
    spec = FusedOptimSpec(optimizer=EmbOptimType.PARTIAL_ROWWISE_ADAM)
    m = FusedEmbeddingBagCollection(_tables(), spec)
    state = m.fused_optimizer.state_dict()["state"]
    assert isinstance(state, dict)
    assert sorted(state) == [
        "embedding_bags.t1.weight",
        "embedding_bags.t2.weight",
        "embedding_bags.t3.weight",
    ]
    t1 = state["embedding_bags.t1.weight"]
    assert sorted(t1) == ["t1.momentum1", "t1.momentum2", "t1.step"]
    assert t1["t1.momentum1"].shape == (10, 4) and t1["t1.momentum2"].shape == (10,)
    assert sorted(m.state_dict()) == [f"embedding_bags.t{i}.weight" for i in (1, 2, 3)]


def test_learning_rate_changes_take_effect_and_step_is_a_no_op() -> None:
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.1)
    m = FusedEmbeddingBagCollection(_tables(), spec)
    for g in m.fused_optimizer.param_groups:
        g["lr"] = 0.0
    before = copy.deepcopy(m.state_dict())
    _train(m, seed=7, steps=1)
    m.fused_optimizer.step()
    m.fused_optimizer.zero_grad()
    _assert_same_weights(m, _Loaded(before))
    warm = WarmupOptimizer(
        m.fused_optimizer,
        [WarmupStage(policy=WarmupPolicy.CONSTANT, max_iters=5, value=0.5)],
        lr=0.2,
    )
    assert all(g["lr"] == pytest.approx(0.1) for g in m.fused_optimizer.param_groups)
    _train(m, seed=7, steps=1)
    warm.step()
    changed = [not torch.equal(m.state_dict()[k], before[k]) for k in before]
    assert any(changed)


class _Loaded(torch.nn.Module):
    def __init__(self, sd: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self._sd = sd

    def state_dict(self, *args: object, **kwargs: object) -> dict[str, torch.Tensor]:  # type: ignore[override]  # a frozen state_dict stand-in
        return self._sd


def test_negative_learning_rate_in_param_groups_is_rejected_at_backward() -> None:
    m = FusedEmbeddingBagCollection(_tables(), "exact_sgd", {"lr": 0.1})
    m.fused_optimizer.param_groups[0]["lr"] = -1.0
    out = m(_batch(torch.Generator().manual_seed(0), 3, False, False)).values()
    with pytest.raises(ValueError, match=r"learning rate.*-1\.0"):
        _loss(out).backward()


def test_fused_weights_are_excluded_from_dense_optimizers() -> None:
    m = FusedEmbeddingBagCollection(_tables(), "exact_sgd", {"lr": 0.1})
    dense = torch.nn.Linear(2, 2)
    named = [*m.named_parameters(), *dense.named_parameters()]
    assert [n for n, _ in in_backward_optimizer_filter(named)] == ["weight", "bias"]


def test_eval_under_no_grad_does_not_update() -> None:
    m = FusedEmbeddingBagCollection(_tables(), "exact_sgd", {"lr": 0.1})
    before = copy.deepcopy(m.state_dict())
    with torch.no_grad():
        m(_batch(torch.Generator().manual_seed(0), 3, False, False))
    _assert_same_weights(m, _Loaded(before))


@pytest.mark.parametrize(
    ("optimizer", "kwargs", "exc", "match"),
    [
        ("adamax", {"lr": 0.1}, ValueError, r"'adamax'"),
        ("exact_sgd", {"lr": -0.5}, ValueError, r"learning_rate.*-0\.5"),
        ("exact_sgd", {"lr": 0.1, "eps": 0.1}, ValueError, r"eps=0\.1.*EXACT_SGD"),
        (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, ValueError, r"momentum=0\.9"),
        (torch.optim.RMSprop, {"lr": 0.1}, ValueError, r"RMSprop"),
    ],
)
def test_bad_optimizer(
    optimizer: object, kwargs: dict[str, object], exc: type[Exception], match: str
) -> None:
    with pytest.raises(exc, match=match):
        FusedEmbeddingBagCollection(_tables(), optimizer, kwargs)  # type: ignore[arg-type]  # bad input under test


def test_bad_tables_and_ids() -> None:
    fp16 = [
        EmbeddingBagConfig(name="h", num_embeddings=4, embedding_dim=2, data_type=DataType.FP16)
    ]
    with pytest.raises(ValueError, match=r"'h'.*FP32.*FP16"):
        FusedEmbeddingBagCollection(fp16, "exact_sgd")
    m = FusedEmbeddingBagCollection(_tables(), "exact_sgd")
    bad = KeyedJaggedTensor(
        keys=["f1", "f2", "f3", "f4"],
        values=torch.tensor([3, 7, 0, 0]),
        lengths=torch.tensor([1, 1, 1, 1]),
    )
    with pytest.raises(IndexError, match=r"'f2' id 7.*'t2' with 7 rows"):
        m(bad)
    with pytest.raises(ValueError, match=r"FusedOptimSpec"):
        FusedEmbeddingBagCollection(_tables(), FusedOptimSpec(optimizer="sgd"), {"lr": 1.0})  # type: ignore[arg-type]  # string accepted


def test_to_same_device_keeps_training() -> None:
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
    a = FusedEmbeddingBagCollection(_tables(), spec)
    b = copy.deepcopy(a).to("cpu")
    _train(a, seed=9, steps=2)
    _train(b, seed=9, steps=2)
    _assert_same_weights(a, b)


def test_batch_of_only_empty_bags_changes_nothing() -> None:
    m = FusedEmbeddingBagCollection(_tables(), "exact_row_wise_adagrad", {"lr": 0.1})
    before = copy.deepcopy(m.state_dict())
    kjt = KeyedJaggedTensor(
        keys=["f1", "f2", "f3", "f4"],
        values=torch.empty(0, dtype=torch.long),
        lengths=torch.zeros(8, dtype=torch.long),
    )
    out = m(kjt).values()
    assert out.shape == (2, 20) and not bool(out.any())
    _loss(out).backward()
    _assert_same_weights(m, _Loaded(before))


@pytest.mark.parametrize(
    "optimizer",
    [
        EmbOptimType.EXACT_ROWWISE_ADAGRAD,
        EmbOptimType.EXACT_ADAGRAD,
        EmbOptimType.EXACT_SGD,
        EmbOptimType.ADAM,
    ],
)
def test_zero_batch_trains_nothing_then_the_next_batch_trains(optimizer: EmbOptimType) -> None:
    # Session 12: a zero batch (no samples) raised IndexError in the fused backward.
    spec = FusedOptimSpec(optimizer=optimizer, learning_rate=0.1)
    fused = FusedEmbeddingBagCollection(_tables(), spec)
    before = {k: v.clone() for k, v in fused.state_dict().items()}
    keys = ["f4", "f1", "f2", "f3"]
    empty = torch.zeros(0, dtype=torch.int64)
    out = fused(KeyedJaggedTensor(keys=keys, values=empty, lengths=empty))
    assert out.values().shape == (0, 20)
    out.values().sum().backward()
    assert all(torch.equal(before[k], v) for k, v in fused.state_dict().items())
    batch = _batch(torch.Generator().manual_seed(0), 3, weighted=False, dup=False)
    fused(batch).values().sum().backward()
    assert not torch.equal(
        before["embedding_bags.t1.weight"], fused.state_dict()["embedding_bags.t1.weight"]
    )


@pytest.mark.parametrize(
    ("lr", "error", "match"),
    [
        (float("nan"), ValueError, r"learning rate must be finite, got nan"),
        (float("inf"), ValueError, r"learning rate must be finite, got inf"),
        (-0.5, ValueError, r"learning rate must be >= 0, got -0\.5"),
        ("fast", TypeError, r"param_groups\[0\]\[\"lr\"\] must be a number, got 'fast'"),
    ],
)
def test_bad_learning_rate_set_on_param_groups(lr: object, error: type, match: str) -> None:
    # A scheduler (or the user) writes param_groups; the next fused backward refuses it by name.
    fused = FusedEmbeddingBagCollection(
        _tables(), FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.1)
    )
    for group in fused.fused_optimizer.param_groups:
        group["lr"] = lr
    batch = _batch(torch.Generator().manual_seed(0), 3, weighted=False, dup=False)
    with pytest.raises(error, match=match):
        fused(batch).values().sum().backward()
