"""Backend selection and parity: fbgemm and torch-native kernels give identical results.

Parity tests are marked ``fbgemm`` and skip when fbgemm_gpu does not import; ``nox -s fbgemm``
runs them with fbgemm-gpu-cpu installed. The fallback test runs everywhere.
"""

from __future__ import annotations

import logging
import sys
import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from jagged_reference import RefKJT, jagged_settings, kjt_lists, ref_kjts

from shardrec_jagged import FbgemmUnavailableWarning, _backend, _kernels, _torch_kernels


def _fbgemm_or_skip() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FbgemmUnavailableWarning)
        if not _backend.fbgemm_available():
            pytest.skip("fbgemm_gpu is not importable here")


def test_missing_fbgemm_logs_once_at_debug_and_falls_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An optional backend that is missing is one DEBUG record, not a warning."""
    _backend.fbgemm_available.cache_clear()
    monkeypatch.setitem(sys.modules, "fbgemm_gpu", None)  # makes `import fbgemm_gpu` fail
    try:
        with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.DEBUG):
            warnings.simplefilter("always")
            assert _backend.fbgemm_available() is False
            assert _backend.fbgemm_available() is False
            lengths = torch.tensor([2, 0, 3], dtype=torch.int32)
            assert _kernels.lengths_to_offsets(lengths).tolist() == [0, 2, 2, 5]
        assert [w for w in caught if w.category is FbgemmUnavailableWarning] == []
        records = [r for r in caplog.records if r.name == _backend.__name__]
        assert len(records) == 1 and records[0].levelno == logging.DEBUG
        assert "torch-native kernels" in records[0].getMessage()
    finally:
        _backend.fbgemm_available.cache_clear()


def test_fbgemm_ops_are_known_kernels() -> None:
    for op in _kernels.FBGEMM_OPS:
        assert callable(getattr(_kernels, op))


lengths_st = st.lists(st.integers(0, 5), max_size=40)


@pytest.mark.fbgemm
@jagged_settings
@given(lengths=lengths_st, dtype=st.sampled_from([torch.int32, torch.int64]))
def test_offsets_parity(lengths: list[int], dtype: torch.dtype) -> None:
    _fbgemm_or_skip()
    from shardrec_jagged import _fbgemm_kernels

    t = torch.tensor(lengths, dtype=dtype)
    a, b = _torch_kernels.lengths_to_offsets(t), _fbgemm_kernels.lengths_to_offsets(t)
    assert a.dtype == b.dtype and torch.equal(a, b)
    rows = len(lengths) // 4
    t2 = t[: rows * 4].view(rows, 4)
    a2 = _torch_kernels.batched_lengths_to_offsets(t2)
    b2 = _fbgemm_kernels.batched_lengths_to_offsets(t2)
    assert a2.dtype == b2.dtype and torch.equal(a2, b2)
    assert _torch_kernels.length_per_key(t2.reshape(-1), rows, 4) == (
        _fbgemm_kernels.length_per_key(t2.reshape(-1), rows, 4)
    )


@pytest.mark.fbgemm
@jagged_settings
@given(ref=ref_kjts(variable=False, min_keys=1), data=st.data())
def test_permute_parity(ref: RefKJT, data: st.DataObject) -> None:
    _fbgemm_or_skip()
    from shardrec_jagged import _fbgemm_kernels

    kjt = ref.build()
    n = len(ref.keys)
    order = data.draw(st.lists(st.integers(0, n - 1), max_size=2 * n))
    parts = (kjt.values(), kjt.weights_or_none(), kjt.lengths())
    args = (parts, kjt.length_per_key(), order, kjt.stride())
    tv, tw, tl = _torch_kernels.permute_kjt(*args)
    fv, fw, fl = _fbgemm_kernels.permute_kjt(*args)
    assert torch.equal(tv, fv) and torch.equal(tl, fl)
    if tw is None or fw is None:
        assert tw is None and fw is None
    else:
        assert torch.equal(tw, fw)
    # And the KJT-level result (whichever backend is selected) matches the reference.
    assert kjt_lists(kjt.permute(order)) == ref.permute(order).bags


@pytest.mark.fbgemm
@pytest.mark.parametrize(("threads", "backend"), [(1, "torch"), (2, "fbgemm")])
def test_permute_backend_follows_the_thread_count(
    monkeypatch: pytest.MonkeyPatch, threads: int, backend: str
) -> None:
    _fbgemm_or_skip()
    from shardrec_jagged import _fbgemm_kernels

    used: list[str] = []
    for name, module in (("torch", _torch_kernels), ("fbgemm", _fbgemm_kernels)):
        kernel = module.permute_kjt

        def spy(*args: object, _k: object = kernel, _n: str = name) -> object:
            used.append(_n)
            return _k(*args)  # type: ignore[operator]

        monkeypatch.setattr(module, "permute_kjt", spy)
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    values, lengths = torch.arange(6), torch.tensor([1, 2, 0, 3])
    out = _kernels.permute_kjt((values, None, lengths), [3, 3], [1, 0], 2)
    assert used == [backend]
    assert out[0].tolist() == [3, 4, 5, 0, 1, 2] and out[2].tolist() == [0, 3, 1, 2]


def test_padded_dense_reference_case() -> None:
    values = torch.tensor([1.0, 2.0, 3.0])
    lengths = torch.tensor([2, 0, 1])
    offsets = _torch_kernels.lengths_to_offsets(lengths)
    out = _torch_kernels.padded_dense(values, offsets, lengths, 3, -1.0)
    assert out.tolist() == [[1.0, 2.0, -1.0], [-1.0, -1.0, -1.0], [3.0, -1.0, -1.0]]
