"""TorchRec paths that are component modules themselves, not re-exports."""

from __future__ import annotations

import importlib
from unittest import mock


def test_datasets_utils_is_the_datapipes_module() -> None:
    import shardrec_data.datapipes as component

    umbrella = importlib.import_module("shardrec.datasets.utils")
    assert umbrella is component
    import shardrec.datasets

    assert shardrec.datasets.utils is component
    with mock.patch("shardrec.datasets.utils.get_worker_info") as info:
        info.return_value = mock.Mock(id=1, num_workers=2)
        assert list(umbrella.ParallelReadConcat([1, 2], [3], [4])) == [4]
