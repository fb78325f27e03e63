"""free_port, seeding and tolerance helpers."""

from __future__ import annotations

import socket

import pytest
import torch

from shardrec_testing import (
    assert_close,
    free_port,
    random_lengths,
    seed_and_log,
    seed_everything,
    seed_from,
    seeded_generator,
    tolerance,
)


def test_free_port_is_bindable() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_seeded_generator_is_deterministic_and_distinct() -> None:
    a = torch.rand(4, generator=seeded_generator("x", 1))
    b = torch.rand(4, generator=seeded_generator("x", 1))
    c = torch.rand(4, generator=seeded_generator("x", 2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert seed_from("x", 1) == seed_from("x", 1) != seed_from("x", 2)


def test_random_lengths_bounds_and_empties() -> None:
    lengths = random_lengths(1000, 5, seeded_generator("l"), empty_fraction=0.5)
    assert lengths.dtype == torch.int64 and lengths.shape == (1000,)
    assert int(lengths.min()) == 0 and int(lengths.max()) <= 5
    assert (lengths == 0).sum() > 400


def test_tolerance_per_dtype() -> None:
    assert tolerance(torch.int64) == (0.0, 0.0)
    assert tolerance(torch.float32)[0] < tolerance(torch.float16)[0] < tolerance(torch.bfloat16)[0]
    with pytest.raises(ValueError, match="complex64"):
        tolerance(torch.complex64)


def test_assert_close_uses_dtype_tolerance() -> None:
    x = torch.ones(3)
    assert_close(x + 1e-7, x)
    with pytest.raises(AssertionError, match="case 3"):
        assert_close(x + 1e-3, x, msg="case 3")
    half = torch.ones(3, dtype=torch.float16)
    assert_close(half + 5e-4, half)
    with pytest.raises(AssertionError):
        assert_close(torch.tensor([1, 2]), torch.tensor([1, 3]))


def test_sanitizer_skips_follow_the_runtime() -> None:
    import unittest

    from shardrec_testing import sanitizer_active, skip_if_asan, skip_if_asan_class

    active = sanitizer_active()
    assert active is False  # CI's interpreter is not sanitizer-instrumented

    @skip_if_asan
    def add(a: int, b: int) -> int:
        return a + b

    assert add(2, 3) == 5 and add.__name__ == "add"

    @skip_if_asan_class
    class Case(unittest.TestCase):
        def test_x(self) -> None:
            pass

    assert not getattr(Case, "__unittest_skip__", False)


def test_seed_and_log_prints_a_seed_that_reproduces_the_call(
    capsys: pytest.CaptureFixture[str],
) -> None:
    @seed_and_log
    def draw(n: int) -> torch.Tensor:
        """Draws."""
        return torch.rand(n)

    first = draw(3)
    seed = int(capsys.readouterr().out.split("Using random seed: ")[1])
    seed_everything(seed)
    assert torch.equal(torch.rand(3), first)
    assert draw.__doc__ == "Draws."
