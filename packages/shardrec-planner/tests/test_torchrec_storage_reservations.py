"""TorchRec's storage reservations, against the reservation worked by hand.

Reference (TorchRec's documented policy): HBM left per rank =
  (1 - percentage) * hbm_cap - 6 * dense parameter bytes - 20 * 8 * ids per batch
for the heuristic; (1 - percentage) * hbm_cap or hbm_cap - bytes for the fixed ones.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from _planner_models import make_ebc, sharder
from torch import nn

from shardrec_planner import (
    EmbeddingTableSharder,
    ParameterConstraints,
    PlannerError,
    PlannerErrorType,
    Storage,
    Topology,
)
from shardrec_planner.constants import SSD_CAP
from shardrec_planner.storage_reservations import (
    FixedAbsoluteStorageReservation,
    FixedPercentageStorageReservation,
    HeuristicalStorageReservation,
)

GiB = 1024**3


class Model(nn.Module):
    def __init__(self, dense_in: int, dense_out: int, tables: list[tuple[str, int, int]]) -> None:
        super().__init__()
        self.dense = nn.Linear(dense_in, dense_out)  # float32: 4 bytes a parameter
        self.register_buffer("steps", torch.zeros(5, dtype=torch.int64))  # 40 bytes, counted 1x
        self.sparse = make_ebc(tables)


def _sharders(model: Model) -> list[EmbeddingTableSharder]:
    return [sharder()]


@pytest.mark.parametrize("device", ["cuda", "cpu"])
@pytest.mark.parametrize("batch_size", [1, 64])
def test_heuristic_reserves_margin_dense_and_batches(device: str, batch_size: int) -> None:
    model = Model(10, 7, [("a", 100, 16), ("b", 50, 8)])
    topo = Topology(world_size=2, compute_device=device, hbm_cap=8 * GiB, ddr_cap=16 * GiB)
    res = HeuristicalStorageReservation(percentage=0.25)
    out = res.reserve(topo, batch_size, model, _sharders(model))
    dense = 6 * 4 * (10 * 7 + 7) + 8 * 5
    kjt = 20 * 8 * (2 * batch_size)  # two tables, one feature each, pooling 1.0
    for d in out.devices:
        if device == "cuda":
            hbm, ddr = int(0.75 * 8 * GiB) - dense - kjt, 16 * GiB
        else:
            hbm, ddr = 0, 16 * GiB - dense - kjt
        assert d.storage == Storage(hbm=hbm, ddr=ddr, ssd=SSD_CAP)  # SSD is not reserved
    # The input topology is untouched; the result is a copy.
    assert topo.devices[0].storage.hbm == (8 * GiB if device == "cuda" else 0)
    assert res.last_reserved_topology is not None


def test_heuristic_uses_pooling_factors_and_dense_estimate() -> None:
    model = Model(4, 4, [("a", 100, 16)])
    topo = Topology(world_size=1, compute_device="cuda", hbm_cap=GiB)
    cons = {"a": ParameterConstraints(pooling_factors=[3.0, 0.5], batch_sizes=[10, 4])}
    res = HeuristicalStorageReservation(percentage=0.0, dense_tensor_estimate=1000)
    out = res.reserve(topo, 99, model, _sharders(model), cons)
    kjt = 20 * 8 * (3 * 10 + 2)
    assert out.devices[0].storage.hbm == GiB - 1000 - kjt


def test_heuristic_refuses_when_nothing_is_left() -> None:
    model = Model(4, 4, [("a", 100, 16)])
    topo = Topology(world_size=1, compute_device="cuda", hbm_cap=GiB)
    with pytest.raises(PlannerError, match="nothing is left") as info:
        HeuristicalStorageReservation(percentage=1.0).reserve(topo, 8, model, _sharders(model))
    assert info.value.error_type is PlannerErrorType.INSUFFICIENT_STORAGE


def test_fixed_reservations() -> None:
    model = Model(4, 4, [("a", 100, 16)])
    topo = Topology(world_size=3, compute_device="cuda", hbm_cap=10 * GiB)
    pct = FixedPercentageStorageReservation(0.3)
    out = pct.reserve(topo, 8, model, _sharders(model))
    assert [d.storage.hbm for d in out.devices] == [int(0.7 * 10 * GiB)] * 3
    assert pct._kjt_storage == Storage(hbm=20 * 8 * 8, ddr=0)  # recorded, not reserved
    ab = FixedAbsoluteStorageReservation.from_gb(2.5)
    out = ab.reserve(topo, 8, model, _sharders(model))
    assert [d.storage.hbm for d in out.devices] == [10 * GiB - int(2.5 * GiB)] * 3
    big = FixedAbsoluteStorageReservation(hbm_reserved_bytes=11 * GiB)
    assert big.reserve(topo, 8, model, _sharders(model)).devices[0].storage.hbm == 0


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: FixedPercentageStorageReservation(1.5), r"percentage.*1\.5"),
        (lambda: HeuristicalStorageReservation(-0.1), r"percentage.*-0\.1"),
        (lambda: FixedAbsoluteStorageReservation(-1), r"hbm_reserved_bytes.*-1"),
    ],
)
def test_bad_reservation_values(make: Callable[[], object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make()


def test_negative_absolute_reservation_is_also_an_assertion_error() -> None:
    # TorchRec asserts here; our ValueError subclass is caught by either expectation.
    with pytest.raises(AssertionError, match=r"hbm_reserved_bytes.*-5"):
        FixedAbsoluteStorageReservation(-5)
