"""A TorchRec-style distributed test, written only with TorchRec's paths under `shardrec`:
MultiProcessTestBase runs it on 2 gloo ranks; the plan comes from `apply_to_all` and the
default sharders; the sharded model's output equals the unsharded module's on every rank."""

from __future__ import annotations

import torch

import shardrec as torchrec
from shardrec.distributed.comm import get_local_size
from shardrec.distributed.model_parallel import (
    DefaultDataParallelWrapper,
    DistributedModelParallel,
)
from shardrec.distributed.sharding_plan import (
    apply_to_all,
    construct_module_sharding_plan,
    get_default_sharders,
    row_wise,
)
from shardrec.distributed.test_utils.multi_process import (
    MultiProcessContext,
    MultiProcessTestBase,
)
from shardrec.distributed.types import ShardingEnv, ShardingPlan


def _model() -> torchrec.EmbeddingBagCollection:
    torch.manual_seed(3)
    return torchrec.EmbeddingBagCollection(
        tables=[
            torchrec.EmbeddingBagConfig(
                name=f"t{i}", embedding_dim=4, num_embeddings=7 + i, feature_names=[f"f{i}"]
            )
            for i in range(2)
        ]
    )


def _batch(rank: int) -> torchrec.KeyedJaggedTensor:
    g = torch.Generator().manual_seed(rank)
    lengths = torch.randint(0, 3, (2 * 3,), generator=g)
    ids = torch.randint(0, 7, (int(lengths.sum()),), generator=g)
    return torchrec.KeyedJaggedTensor(keys=["f0", "f1"], values=ids, lengths=lengths)


def _sharded_equals_unsharded(rank: int, world_size: int, backend: str) -> None:
    with MultiProcessContext(rank, world_size, backend) as ctx:
        assert ctx.pg is not None
        assert get_local_size(world_size) == world_size  # one host
        ebc = _model()
        module_plan = construct_module_sharding_plan(
            ebc, apply_to_all(ebc, row_wise()), world_size=world_size
        )
        dmp = DistributedModelParallel(
            _model(),
            env=ShardingEnv.from_process_group(ctx.pg),
            plan=ShardingPlan(plan={"": module_plan}),
            sharders=get_default_sharders(),
            data_parallel_wrapper=DefaultDataParallelWrapper(),
        )
        got = dmp(_batch(rank))
        expected = ebc(_batch(rank))
        assert got.keys() == expected.keys()
        torch.testing.assert_close(got.values(), expected.values())


class DistributedApiTest(MultiProcessTestBase):
    def test_row_wise_plan_from_apply_to_all(self) -> None:
        self._run_multi_process_test(
            callable=_sharded_equals_unsharded, world_size=2, backend="gloo"
        )


def test_comm_caches_no_process_groups() -> None:
    """TorchRec's cached-group globals exist and stay None: `intra_and_cross_node_pg` returns
    fresh groups, so a teardown that destroys cached groups finds none to destroy."""
    from shardrec.distributed import comm

    assert comm._INTRA_PG is None and comm._CROSS_PG is None


def test_patching_the_proposers_logger_reaches_every_proposer() -> None:
    """`mock.patch` of TorchRec's `planner.proposers.logger` path replaces the logger the
    proposers (the offload scale-up one included) log through, and restores it after."""
    import logging
    from unittest import mock

    from shardrec.distributed.planner import proposers as shim
    from shardrec_planner import offload_scaleup
    from shardrec_planner import proposers as source

    original = source.logger
    assert isinstance(original, logging.Logger) and shim.logger is original
    with mock.patch("shardrec.distributed.planner.proposers.logger") as patched:
        assert source.logger is patched and offload_scaleup._logger() is patched
        offload_scaleup._logger().warning("seen")
    patched.warning.assert_called_once_with("seen")
    assert source.logger is original and shim.logger is original


def test_patching_storage_specific_sizes_reaches_calculate_shard_storages() -> None:
    """TorchRec's tests patch `shard_estimators._calculate_storage_specific_sizes`: the patch
    changes what `calculate_shard_storages` computes, and is undone after."""
    from unittest import mock

    import torch

    from shardrec.distributed.planner import shard_estimators as shim
    from shardrec_planner import shard_storage

    def storages() -> list[object]:
        return shim.calculate_shard_storages(
            sharder=None, sharding_type="table_wise", tensor=torch.empty(100, 8),
            compute_device="cuda", compute_kernel="fused", shard_sizes=[[100, 8]],
            batch_sizes=[4], world_size=1, local_world_size=1, input_lengths=[1.0],
            num_poolings=[1.0], caching_ratio=0.2, is_pooled=True, input_data_type_size=8,
            output_data_type_size=4,
        )  # fmt: skip

    original, before = shard_storage._calculate_storage_specific_sizes, storages()
    with mock.patch(
        "shardrec.distributed.planner.shard_estimators._calculate_storage_specific_sizes",
        side_effect=lambda storage, *args: [storage * 1000] * len(args[1]),
    ):
        patched = storages()
    assert [s.hbm for s in patched] != [s.hbm for s in before]  # type: ignore[attr-defined]
    assert shard_storage._calculate_storage_specific_sizes is original
    assert shim._calculate_storage_specific_sizes is original and storages() == before
    with mock.patch(
        "shardrec.distributed.planner.shard_estimators._calculate_shard_io_sizes",
        return_value=([7], [9]),
    ):
        assert shard_storage._calculate_shard_io_sizes is shim._calculate_shard_io_sizes
        assert storages() != before
    assert storages() == before
    assert shim._get_optimizer_multipler is shard_storage._get_optimizer_multipler


def test_forwarding_a_missing_name_is_refused() -> None:
    import pytest

    from shardrec_planner import proposers
    from shardrec_planner.forwarding import forward_attributes

    with pytest.raises(AttributeError, match="has no 'nothing' to forward"):
        forward_attributes(__name__, proposers, ["nothing"])
