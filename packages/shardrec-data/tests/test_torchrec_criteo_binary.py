"""BinaryCriteoUtils, InMemoryBinaryCriteoIterDataPipe and RandomRecDataset against naive loops."""

from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest
import torch

from shardrec_data import BinaryCriteoUtils, InMemoryBinaryCriteoIterDataPipe, RandomRecDataset
from shardrec_data.criteo_in_memory import batch_sizes_per_round


def _save(path: pathlib.Path, arr: np.ndarray) -> str:
    np.save(path, arr)
    return str(path)


def test_tsv_to_npys_matches_a_naive_conversion(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(0)
    lines, ints, cats, labels = [], [], [], []
    for _ in range(9):
        i = [int(v) for v in rng.integers(-2, 50, 13)]
        c = [int(v) for v in rng.integers(0, 2**32, 26)]
        y = int(rng.integers(0, 2))
        i[3] = 0  # written as an empty field
        lines.append(
            "\t".join(
                [str(y)]
                + [str(v) if k != 3 else "" for k, v in enumerate(i)]
                + [f"{v:08x}" for v in c]
            )
        )
        ints.append(i)
        cats.append(c)
        labels.append(y)
    src = tmp_path / "day_0.tsv"
    src.write_text("\n".join(lines) + "\n")
    out = [str(tmp_path / f"{n}.npy") for n in ("d", "s", "l")]
    BinaryCriteoUtils.tsv_to_npys(str(src), *out)
    dense, sparse, lab = (np.load(p) for p in out)
    raw = np.array(ints, dtype=np.int64)
    np.testing.assert_allclose(dense, np.log(raw - raw.min() + 2), rtol=1e-6)
    assert dense.dtype == np.float32 and sparse.dtype == np.int64 and lab.dtype == np.int32
    np.testing.assert_array_equal(sparse, np.array(cats))
    np.testing.assert_array_equal(lab, np.array(labels).reshape(-1, 1))
    assert BinaryCriteoUtils.get_shape_from_npy(out[0]) == (9, 13)


@pytest.mark.parametrize(
    ("lengths", "world", "start", "last"),
    [
        ([14, 17, 20], 3, 0, None),
        ([5, 1, 9, 2], 4, 0, None),
        ([7], 3, 0, None),
        ([10, 10], 3, 4, 15),
    ],
)
def test_file_row_ranges_partition_the_rows(
    lengths: list[int], world: int, start: int, last: int | None
) -> None:
    end = sum(lengths) if last is None else last + 1
    owner = np.array_split(np.arange(start, end), world)  # contiguous, earlier ranks longer
    file_of = np.repeat(np.arange(len(lengths)), lengths)
    local = np.concatenate([np.arange(n) for n in lengths])
    for rank in range(world):
        ranges, remainder = BinaryCriteoUtils.get_file_row_ranges_and_remainder(
            lengths, rank, world, start_row=start, last_row=last
        )
        assert remainder == (end - start) % world
        expected: dict[int, tuple[int, int]] = {}
        for g in owner[rank]:
            f = int(file_of[g])
            lo, hi = expected.get(f, (int(local[g]), int(local[g])))
            expected[f] = (min(lo, int(local[g])), max(hi, int(local[g])))
        assert ranges == expected


def test_load_npy_range_and_its_bounds(tmp_path: pathlib.Path) -> None:
    arr = np.arange(40, dtype=np.float32).reshape(10, 4)
    path = _save(tmp_path / "a.npy", arr)
    np.testing.assert_array_equal(BinaryCriteoUtils.load_npy_range(path, 3, 5), arr[3:8])
    np.testing.assert_array_equal(
        BinaryCriteoUtils.load_npy_range(path, 0, 10, mmap_mode=True), arr
    )
    with pytest.raises(ValueError, match="start_row"):
        BinaryCriteoUtils.load_npy_range(path, 10, 1)
    with pytest.raises(ValueError, match="num_rows"):
        BinaryCriteoUtils.load_npy_range(path, 8, 3)
    with pytest.raises(ValueError, match="ndim"):
        BinaryCriteoUtils.load_npy_range(_save(tmp_path / "b.npy", np.arange(3)), 0, 1)


@pytest.mark.parametrize("threshold", [0, 2, 3])
def test_sparse_to_contiguous_matches_a_dict_loop(tmp_path: pathlib.Path, threshold: int) -> None:
    rng = np.random.default_rng(threshold)
    days = [rng.integers(0, 12, size=(int(rng.integers(3, 9)), 3)) for _ in range(3)]
    files = [_save(tmp_path / f"day_{i}_sparse.npy", d) for i, d in enumerate(days)]
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    BinaryCriteoUtils.sparse_to_contiguous(files, str(out_dir), threshold, 3)
    for col in range(3):
        seen = [int(v) for d in days for v in d[:, col]]
        counts = {v: seen.count(v) for v in seen}
        mapping: dict[int, int] = {}
        nxt = 2
        for v in seen:
            if v not in mapping:
                if threshold > 1 and counts[v] < threshold:
                    mapping[v] = 1
                else:
                    mapping[v], nxt = nxt, nxt + 1
        for i, d in enumerate(days):
            got = np.load(out_dir / f"day_{i}_sparse_contig_freq.npy")
            assert got[:, col].tolist() == [mapping[int(v)] for v in d[:, col]]


def test_shuffle_keeps_rows_and_copies_the_last_day(tmp_path: pathlib.Path) -> None:
    days, rows = 3, {0: 4, 1: 5}
    for d in range(days):
        n = rows.get(d, 3)
        ids = np.arange(n) + 100 * d
        np.save(tmp_path / f"day_{d}_dense.npy", np.stack([ids, ids + 0.5], 1).astype(np.float32))
        np.save(
            tmp_path / f"day_{d}_sparse.npy", np.stack([ids, ids * 2, ids * 3], 1).astype(np.int32)
        )
        np.save(tmp_path / f"day_{d}_labels.npy", ids.reshape(-1, 1).astype(np.int32))
    out = tmp_path / "out"
    out.mkdir()
    BinaryCriteoUtils.shuffle(
        str(tmp_path), str(tmp_path), str(out), rows, None, days, 2, 3, random_seed=5
    )
    before = np.concatenate([np.load(tmp_path / f"day_{d}_labels.npy") for d in range(2)])
    after = np.concatenate([np.load(out / f"day_{d}_labels.npy") for d in range(2)])
    assert sorted(before.ravel()) == sorted(after.ravel()) and not np.array_equal(before, after)
    for d in range(2):
        lab = np.load(out / f"day_{d}_labels.npy").ravel()
        np.testing.assert_array_equal(np.load(out / f"day_{d}_sparse.npy")[:, 1], lab * 2)
        np.testing.assert_array_equal(np.load(out / f"day_{d}_dense.npy")[:, 1], lab + 0.5)
    for part in ("dense", "sparse", "labels"):
        np.testing.assert_array_equal(
            np.load(out / f"day_2_{part}.npy"), np.load(tmp_path / f"day_2_{part}.npy")
        )


def _npys(
    tmp_path: pathlib.Path, rows_per_file: list[int]
) -> tuple[list[str], list[str], list[str]]:
    d, s, lab = [], [], []
    at = 0
    for i, n in enumerate(rows_per_file):
        ids = np.arange(at, at + n)
        at += n
        d.append(_save(tmp_path / f"{i}_d.npy", np.repeat(ids[:, None], 13, 1).astype(np.float32)))
        s.append(
            _save(tmp_path / f"{i}_s.npy", (ids[:, None] * 26 + np.arange(26)).astype(np.int64))
        )
        lab.append(_save(tmp_path / f"{i}_l.npy", ids.reshape(-1, 1).astype(np.int32)))
    return d, s, lab


def _naive_batches(n: int, batch: int, world: int) -> list[int]:
    """Global batch sizes by filling world-size rounds, the last round spread evenly."""
    sizes = []
    left = n
    while left >= batch * world:
        sizes += [batch] * world
        left -= batch * world
    if left:
        if left < world:  # too few rows for one each: merge with the last full round
            left += batch * world
            sizes = sizes[:-world]
        sizes += [left // world + (1 if r < left % world else 0) for r in range(world)]
    return sizes


@pytest.mark.parametrize(
    ("files", "batch", "world"),
    [([1] * 9, 2, 2), ([30, 7, 13], 4, 3), ([101], 32, 8), ([17], 3, 5)],
)
def test_in_memory_batches_cover_every_row_once(
    tmp_path: pathlib.Path, files: list[int], batch: int, world: int
) -> None:
    paths = _npys(tmp_path, files)
    sizes = _naive_batches(sum(files), batch, world)
    assert batch_sizes_per_round(sum(files), batch, world, False) == sizes
    seen: list[int] = []
    for rank in range(world):
        pipe = InMemoryBinaryCriteoIterDataPipe(
            "train", *paths, batch_size=batch, rank=rank, world_size=world, hashes=[7] * 26
        )
        batches = list(pipe)
        assert len(batches) == len(pipe) == len(sizes) // world
        for k, b in enumerate(batches):
            g = k * world + rank
            first = sum(sizes[:g])
            ids = list(range(first, first + sizes[g]))
            assert b.labels.tolist() == ids
            assert b.dense_features[:, 0].tolist() == ids
            kjt = b.sparse_features
            expected = (torch.tensor(ids)[None, :] * 26 + torch.arange(26)[:, None]) % 7
            assert kjt.keys() == [f"cat_{i}" for i in range(26)] and kjt.stride() == len(ids)
            assert torch.equal(kjt.values(), expected.reshape(-1))
            seen += ids
    assert sorted(seen) == list(range(sum(files)))


@pytest.mark.parametrize("stage", ["val", "test"])
def test_in_memory_val_and_test_halves(tmp_path: pathlib.Path, stage: str) -> None:
    paths = _npys(tmp_path, [11])
    rows = [
        int(v)
        for r in range(2)
        for b in InMemoryBinaryCriteoIterDataPipe(stage, *paths, batch_size=2, rank=r, world_size=2)
        for v in b.labels
    ]
    assert sorted(rows) == (list(range(6)) if stage == "val" else list(range(6, 11)))


def test_in_memory_shuffled_training_set_is_the_seeded_permutation(tmp_path: pathlib.Path) -> None:
    files, world = [10, 15], 3
    paths = _npys(tmp_path, files)
    np.random.seed(4)
    perm = np.random.permutation(25)
    shuffled = np.empty(25, dtype=np.int64)
    shuffled[perm] = np.arange(25)
    blocks = np.array_split(shuffled, world)
    for rank in range(world):
        pipe = InMemoryBinaryCriteoIterDataPipe(
            "train",
            *paths,
            batch_size=4,
            rank=rank,
            world_size=world,
            shuffle_training_set=True,
            shuffle_training_set_random_seed=4,
        )
        got = [int(v) for b in pipe for v in b.labels]
        assert got == blocks[rank].tolist() and len(pipe) == math.ceil(len(got) / 4)


def test_in_memory_bad_arguments(tmp_path: pathlib.Path) -> None:
    paths = _npys(tmp_path, [4])
    for kwargs, match in [
        ({"stage": "eval"}, "stage"),
        ({"batch_size": 0}, "batch_size"),
        ({"rank": 2}, "rank"),
        ({"hashes": [3] * 5}, "hashes"),
    ]:
        args = {"stage": "train", "batch_size": 2, "rank": 0, "world_size": 2, **kwargs}
        with pytest.raises(ValueError, match=match):
            InMemoryBinaryCriteoIterDataPipe(
                dense_paths=paths[0], sparse_paths=paths[1], labels_paths=paths[2], **args
            )  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="same number"):
        InMemoryBinaryCriteoIterDataPipe("train", paths[0], [], paths[2], 2, 0, 1)


def test_random_rec_dataset_shapes_ranges_and_cycle() -> None:
    def make() -> RandomRecDataset:
        return RandomRecDataset(
            keys=["a", "b"],
            batch_size=6,
            hash_sizes=[5, 9],
            ids_per_features=[3, 4],
            min_ids_per_features=[1, 4],
            num_dense=2,
            manual_seed=1,
            num_batches=5,
            num_generated_batches=2,
        )

    ds = make()
    batches = list(ds)
    assert len(ds) == 5 and len(batches) == 5 and batches[2] is batches[0]
    for b in batches:
        kjt = b.sparse_features
        la, lb = kjt["a"].lengths(), kjt["b"].lengths()
        assert ((la >= 1) & (la <= 3)).all() and (lb == 4).all()
        assert (kjt["a"].values() < 5).all() and (kjt["b"].values() < 9).all()
        assert b.dense_features.shape == (6, 2) and set(b.labels.tolist()) <= {0, 1}
    again = list(make())
    assert torch.equal(again[1].sparse_features.values(), batches[1].sparse_features.values())
    fresh = RandomRecDataset(keys=["a"], batch_size=2, num_generated_batches=-1, num_batches=3)
    kept = list(fresh)  # held: ids of freed batches could be reused
    assert len({id(b) for b in kept}) == 3
    with pytest.raises(ValueError, match="hash_sizes"):
        RandomRecDataset(keys=["a", "b"], batch_size=2, hash_sizes=[3])
