"""TorchRec's perf estimator reads the topology's collective rates (`intra_host_bw`,
`inter_host_bw`, or a `generalized_comms_bandwidths` model), as TorchRec's does.

Reference: TorchRec's formula for a table-wise shard, forward comms = pooled output bytes of the
global batch / the link's rate (`B * W * dim * element size / bw`), and the data-parallel
all-reduce running at `inter_host_bw * local_world_size`.
"""

from __future__ import annotations

import pytest
from _planner_models import make_ebc, sharder

from shardrec_planner import Topology
from shardrec_planner.constants import CROSS_NODE_BANDWIDTH, INTRA_NODE_BANDWIDTH
from shardrec_planner.enumerators import EmbeddingEnumerator
from shardrec_planner.shard_perf import EmbeddingPerfEstimator
from shardrec_planner.topology_parts import BasicCommsBandwidths

B, ROWS, DIM = 64, 1000, 16


def _perfs(topology: Topology) -> dict[str, object]:
    enumerator = EmbeddingEnumerator(
        topology=topology, batch_size=B, estimator=EmbeddingPerfEstimator(topology=topology)
    )
    tw_dp = sharder(
        sharding_types=["table_wise", "data_parallel"], compute_kernels=["fused", "dense"]
    )
    options = enumerator.enumerate(make_ebc([("t", ROWS, DIM)]), [tw_dp])
    return {o.sharding_type: o.shards[0].perf for o in options}


@pytest.mark.parametrize("scale", [0.5, 2.0, 7.0])
def test_collective_rates_come_from_the_topology(scale: float) -> None:
    intra, inter = INTRA_NODE_BANDWIDTH * scale, CROSS_NODE_BANDWIDTH * scale
    given = Topology(world_size=2, compute_device="cuda", intra_host_bw=intra, inter_host_bw=inter)
    model = Topology(
        world_size=2,
        compute_device="cuda",
        generalized_comms_bandwidths=BasicCommsBandwidths(intra_host_bw=intra, inter_host_bw=inter),
    )
    default = _perfs(Topology(world_size=2, compute_device="cuda"))
    for topo in (given, model):
        perfs = _perfs(topo)
        tw = perfs["table_wise"]
        assert tw.fwd_comms == pytest.approx(B * 2 * DIM * 4 / intra)  # type: ignore[attr-defined]
        assert tw.fwd_comms == pytest.approx(default["table_wise"].fwd_comms / scale)  # type: ignore[attr-defined]
        assert tw.fwd_compute == default["table_wise"].fwd_compute  # type: ignore[attr-defined]
        # the all-reduce part of data_parallel's backward scales with the cross-host rate
        dp, dp0 = perfs["data_parallel"], default["data_parallel"]
        reduce0 = ROWS * DIM * 4 / (CROSS_NODE_BANDWIDTH * 2)
        assert dp0.bwd_comms - dp.bwd_comms == pytest.approx(reduce0 * (1 - 1 / scale))  # type: ignore[attr-defined]
