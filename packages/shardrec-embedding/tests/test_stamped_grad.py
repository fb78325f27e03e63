"""The native backward's stamped dense gradient (no full zero of a reused buffer): bit for bit
the zeros + index_add_ reference, step after step, whatever the caller did with `.grad`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
from shardrec_embedding._grouping import embedding_names_by_table
from shardrec_embedding._native import native_available
from shardrec_embedding._native.ops import native_clear_stale, native_scatter
from shardrec_embedding.batched_lookup import GradWorkspace, next_stamp
from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing import seeded_generator

pytestmark = pytest.mark.skipif(
    not native_available(), reason="native kernels unavailable (no compiler or SHARDREC_NATIVE=0)"
)


def _tables(pooling: PoolingType) -> list[EmbeddingBagConfig]:
    # One table read by two features, one feature read by two tables, widths on the
    # specialized kernels (16, 64) and the generic one (24).
    return [
        EmbeddingBagConfig(
            name="a",
            num_embeddings=60,
            embedding_dim=16,
            feature_names=["s", "f1"],
            pooling=pooling,
        ),
        EmbeddingBagConfig(
            name="b", num_embeddings=9, embedding_dim=24, feature_names=["f2"], pooling=pooling
        ),
        EmbeddingBagConfig(
            name="c", num_embeddings=40, embedding_dim=64, feature_names=["s"], pooling=pooling
        ),
    ]


def _kjt(tables: list[EmbeddingBagConfig], step: int, weighted: bool) -> KeyedJaggedTensor:
    """Random bags (empty ones included, many duplicate ids) over a step-dependent id range,
    so the rows written change from step to step."""
    gen = seeded_generator("stamped", step, weighted)
    keys = ["s", "f1", "f2"]
    rows = {"s": 40, "f1": 60, "f2": 9}
    batch = 7
    lengths = torch.randint(0, 6, (len(keys) * batch,), generator=gen)
    values = []
    for k, n in zip(keys, lengths.view(len(keys), batch).sum(1).tolist(), strict=True):
        low = (step * 7) % rows[k] // 2
        values.append(torch.randint(low, rows[k], (n,), generator=gen))
    flat = torch.cat(values)
    weights = torch.rand(flat.numel(), generator=gen) if weighted else None
    return KeyedJaggedTensor(keys=keys, values=flat, lengths=lengths, weights=weights, stride=batch)


def _grad_out(ebc: EmbeddingBagCollection, kjt: KeyedJaggedTensor, step: int) -> dict[str, Any]:
    gen = seeded_generator("stamped-grad", step)
    out = ebc(kjt).to_dict()
    return {k: (v, torch.randn(v.shape, generator=gen)) for k, v in out.items()}


def _backward(ebc: EmbeddingBagCollection, kjt: KeyedJaggedTensor, step: int) -> dict[str, Any]:
    pairs = _grad_out(ebc, kjt, step)
    sum((v * g).sum() for v, g in pairs.values()).backward()  # type: ignore[union-attr]
    return {k: g for k, (_, g) in pairs.items()}


def _reference(
    tables: list[EmbeddingBagConfig], kjt: KeyedJaggedTensor, grads: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """zeros + index_add_ of each id's scaled output gradient, segment by segment in order."""
    jts = kjt.to_dict()
    out: dict[str, torch.Tensor] = {}
    for t, names in zip(tables, embedding_names_by_table(tables), strict=True):
        ref = torch.zeros(t.num_embeddings, t.embedding_dim)
        for f, name in zip(t.feature_names, names, strict=True):
            jt = jts[f]
            lengths = jt.lengths()
            bag = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
            scale = torch.ones(bag.numel())
            if t.pooling is PoolingType.MEAN:
                scale = (1.0 / lengths.clamp(min=1).float())[bag]
            weights = jt.weights_or_none()
            if weights is not None:
                scale = scale * weights
            ref.index_add_(0, jt.values(), grads[name][bag] * scale.unsqueeze(1))
        out[t.name] = ref
    return out


def _check(
    ebc: EmbeddingBagCollection, expected: dict[str, torch.Tensor], tables: list[EmbeddingBagConfig]
) -> None:
    for t in tables:
        grad = ebc.embedding_bags[t.name].weight.grad
        assert grad is not None
        assert _bits(grad, expected[t.name]), t.name


def _bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit (`torch.equal` takes -0.0 for 0.0)."""
    return a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


def _count_full_zeros(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real: Callable[..., torch.Tensor] = GradWorkspace.zeros

    def counted(self: GradWorkspace, *args: Any) -> torch.Tensor:
        calls.append(1)
        return real(self, *args)

    monkeypatch.setattr(GradWorkspace, "zeros", counted)
    return calls


@pytest.mark.parametrize(
    ("pooling", "weighted"),
    [(PoolingType.SUM, False), (PoolingType.SUM, True), (PoolingType.MEAN, False)],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_steps_with_set_to_none_match_the_reference_and_skip_the_full_zero(
    monkeypatch: pytest.MonkeyPatch, pooling: PoolingType, weighted: bool, threads: int
) -> None:
    tables = _tables(pooling)
    torch.manual_seed(0)
    ebc = EmbeddingBagCollection(tables, is_weighted=weighted)
    full_zeros = _count_full_zeros(monkeypatch)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for step in range(6):
            kjt = _kjt(tables, step, weighted)
            grads = _backward(ebc, kjt, step)
            _check(ebc, _reference(tables, kjt, grads), tables)
            ebc.zero_grad(set_to_none=True)
    finally:
        torch.set_num_threads(before)
    # Only the first backward (and the first per group) zeroes the whole buffer.
    assert len(full_zeros) == len(ebc._workspaces)


def test_two_backwards_without_zero_grad_accumulate(monkeypatch: pytest.MonkeyPatch) -> None:
    tables = _tables(PoolingType.SUM)
    torch.manual_seed(1)
    ebc = EmbeddingBagCollection(tables)
    kjts = [_kjt(tables, step, False) for step in range(4)]
    first = _reference(tables, kjts[0], _backward(ebc, kjts[0], 0))
    second = _reference(tables, kjts[1], _backward(ebc, kjts[1], 1))
    _check(ebc, {k: first[k] + second[k] for k in first}, tables)
    ebc.zero_grad(set_to_none=True)
    # The accumulation wrote into the first backward's buffer: the next one must not trust it.
    _check(ebc, _reference(tables, kjts[2], _backward(ebc, kjts[2], 2)), tables)
    ebc.zero_grad(set_to_none=True)
    _check(ebc, _reference(tables, kjts[3], _backward(ebc, kjts[3], 3)), tables)


@pytest.mark.parametrize(
    "touch",
    [
        "zero_grad_keep",
        "add_in_place",
        "clip",
        "view_write",
    ],
)
def test_a_gradient_changed_in_place_between_steps_is_never_trusted(touch: str) -> None:
    tables = _tables(PoolingType.SUM)
    torch.manual_seed(2)
    ebc = EmbeddingBagCollection(tables)
    for step in range(4):
        kjt = _kjt(tables, step, False)
        grads = _backward(ebc, kjt, step)
        _check(ebc, _reference(tables, kjt, grads), tables)
        weights = [ebc.embedding_bags[t.name].weight for t in tables]
        if touch == "zero_grad_keep":
            ebc.zero_grad(set_to_none=False)
            continue
        with torch.no_grad():
            for w in weights:
                assert w.grad is not None
                if touch == "add_in_place":
                    w.grad.add_(w, alpha=0.5)  # e.g. hand-written weight decay
                elif touch == "view_write":
                    w.grad[-1].fill_(3.0)  # a row no step writes (ids stay below it)
        if touch == "clip":
            torch.nn.utils.clip_grad_norm_(weights, 1e-3)
        ebc.zero_grad(set_to_none=True)


def test_torch_optim_over_steps_matches_the_reference_update() -> None:
    tables = _tables(PoolingType.SUM)
    torch.manual_seed(3)
    ebc = EmbeddingBagCollection(tables, is_weighted=True)
    opt = torch.optim.Adagrad(ebc.parameters(), lr=0.1)
    ref_weights = {t.name: ebc.embedding_bags[t.name].weight.detach().clone() for t in tables}
    ref_params = [torch.nn.Parameter(ref_weights[t.name]) for t in tables]
    ref_opt = torch.optim.Adagrad(ref_params, lr=0.1)
    for step in range(5):
        kjt = _kjt(tables, step, True)
        expected = _reference(tables, kjt, _backward(ebc, kjt, step))
        opt.step()
        opt.zero_grad()
        for t, p in zip(tables, ref_params, strict=True):
            p.grad = expected[t.name]
        ref_opt.step()
        ref_opt.zero_grad()
        for t, p in zip(tables, ref_params, strict=True):
            assert torch.equal(ebc.embedding_bags[t.name].weight.detach(), p.detach())


def test_a_gradient_still_held_is_never_overwritten() -> None:
    tables = _tables(PoolingType.SUM)
    torch.manual_seed(4)
    ebc = EmbeddingBagCollection(tables)
    kjt = _kjt(tables, 0, False)
    first = _reference(tables, kjt, _backward(ebc, kjt, 0))
    held = {t.name: ebc.embedding_bags[t.name].weight.grad for t in tables}
    ebc.zero_grad(set_to_none=True)
    kjt = _kjt(tables, 1, False)
    _check(ebc, _reference(tables, kjt, _backward(ebc, kjt, 1)), tables)
    for name, grad in held.items():
        assert grad is not None and torch.equal(grad, first[name])


def test_workspace_refuses_to_trust_a_buffer_stamped_with_the_same_stamp() -> None:
    ws = GradWorkspace()
    buffer, marks = ws.stamped(5, 4, 7)
    assert torch.equal(buffer, torch.zeros(5, 4)) and torch.equal(marks, torch.zeros(5).byte())
    grad = torch.ones(1, 4)
    offsets = torch.tensor([0, 2])
    values = torch.tensor([1, 1])
    native_scatter([buffer], values, offsets, None, grad, [0], [0], [0], stamps=[marks], stamp=7)
    native_clear_stale(buffer, marks, 7)
    ws.settle(buffer, 7)
    assert marks.tolist() == [0, 7, 0, 0, 0] and buffer[1].tolist() == [2.0] * 4
    # Same stamp again: the marks cannot tell this pass's rows from the last one's.
    again, again_marks = ws.stamped(5, 4, 7)
    assert again is buffer and int(again.abs().sum()) == 0 and int(again_marks.sum()) == 0
    native_scatter(
        [again], values, offsets, None, grad, [0], [0], [0], stamps=[again_marks], stamp=7
    )
    native_clear_stale(again, again_marks, 7)
    ws.settle(again, 7)
    # A different stamp: no full zero; row 1 is rewritten, a stale row 3 cleared.
    third, third_marks = ws.stamped(5, 4, 8)
    assert third is buffer and third[1].tolist() == [2.0] * 4
    native_scatter(
        [third], torch.tensor([3]), torch.tensor([0, 1]), None, grad, [0], [0], [0],
        stamps=[third_marks], stamp=8,
    )  # fmt: skip
    native_clear_stale(third, third_marks, 8)
    expected = torch.zeros(5, 4)
    expected[3] = 1.0
    assert torch.equal(third, expected) and third_marks.tolist() == [0, 0, 0, 8, 0]


def test_the_python_paths_zeros_invalidate_a_settled_buffer() -> None:
    ws = GradWorkspace()
    buffer, marks = ws.stamped(3, 2, 1)
    marks[0] = 1
    buffer[0] = 5.0
    ws.settle(buffer, 1)
    ws.zeros(3, 2, torch.float32, torch.device("cpu"))
    _, fresh_marks = ws.stamped(3, 2, 2)
    assert int(fresh_marks.sum()) == 0


def test_next_stamp_cycles_within_a_byte() -> None:
    seen = {next_stamp() for _ in range(600)}
    assert seen == set(range(1, 256))


def test_negative_zero_output_gradients_give_the_zeroed_buffers_positive_zero() -> None:
    tables = _tables(PoolingType.SUM)
    ebc = EmbeddingBagCollection(tables)
    for step in range(3):
        kjt = _kjt(tables, step, False)
        out = ebc(kjt).to_dict()
        grads = {k: torch.full(v.shape, -0.0) for k, v in out.items()}
        sum((v * grads[k]).sum() for k, v in out.items()).backward()  # type: ignore[union-attr]
        expected = _reference(tables, kjt, grads)
        assert all(int(e.view(torch.int32).abs().sum()) == 0 for e in expected.values())
        _check(ebc, expected, tables)
        ebc.zero_grad(set_to_none=True)
