"""Every check `shardrec train` makes before any process starts.

Each problem is one line naming the flag, the value and what would work. The launcher prints
them all and exits with status 2, the status argparse uses for bad usage, so a mistake costs a
second, not a torchrun start-up and a traceback per rank.
"""

from __future__ import annotations

import torch

from shardrec_data import RecDataset
from shardrec_planner import ShardingType
from shardrec_train.build import build_raw_id_model
from shardrec_train.checkpoints import latest_checkpoint, shape_problems
from shardrec_train.data import build_dataset
from shardrec_train.dynamic import problems as dynamic_problems
from shardrec_train.options import TrainOptions, number_problems
from shardrec_train.sharding import forced_type_problem
from shardrec_train.tiered import flag_problems as tier_flag_problems
from shardrec_train.tiered import store_problems as tier_store_problems


def backend_problems(opts: TrainOptions, cuda_devices: int) -> list[str]:
    """nccl needs one visible CUDA GPU per local rank."""
    if opts.backend != "nccl":
        return []
    if cuda_devices == 0:
        return ["--backend nccl needs CUDA GPUs, but none is visible; use --backend gloo"]
    if opts.nproc_per_node > cuda_devices:
        return [
            f"--backend nccl runs one rank per GPU: --nproc-per-node {opts.nproc_per_node} "
            f"is more than the {cuda_devices} visible GPU(s)"
        ]
    return []


def output_problems(opts: TrainOptions) -> list[str]:
    """--resume needs a checkpoint; a fresh run must not mix with an old run's checkpoints."""
    latest = latest_checkpoint(opts.out)
    if opts.resume and latest is None:
        return [
            f"--resume: no checkpoint under {opts.out / 'checkpoints'} (expected "
            "step_<k> directories); drop --resume to start a new run"
        ]
    if not opts.resume and latest is not None:
        return [
            f"--out {opts.out} already holds checkpoints (latest {latest[1].name}); pass "
            "--resume to continue that run, or choose another --out"
        ]
    if opts.out.exists() and not opts.out.is_dir():
        return [f"--out {opts.out} exists and is not a directory"]
    return []


def dataset_problems(opts: TrainOptions, dataset: RecDataset) -> list[str]:
    """Splits big enough for the world; a forced sharding type that fits the tables."""
    problems: list[str] = []
    world = opts.world_size
    for split in ("train", "test"):
        n = dataset.num_samples(split)
        if n // world == 0 or dataset.num_batches(split, opts.batch_size, world) == 0:
            problems.append(
                f"--dataset {opts.dataset}: the {split} split has {n} samples, fewer than the "
                f"world size {world}; every rank needs at least one sample"
            )
    if opts.sharding_type is not None:
        tables = [(f.name, f.num_embeddings) for f in dataset.sparse_features]
        problem = forced_type_problem(
            ShardingType(opts.sharding_type), tables, opts.embedding_dim, world, opts.nproc_per_node
        )
        if problem is not None:
            problems.append(problem)
    return problems


def resume_problems(opts: TrainOptions, dataset: RecDataset) -> list[str]:
    """--resume: the checkpoint's model has the shapes these flags build (on `meta`: free)."""
    if not opts.resume:
        return []
    model, _ = build_raw_id_model(opts, dataset, torch.device("meta"))
    expected = {
        key: tuple(value.shape)
        for key, value in model.state_dict().items()
        if isinstance(value, torch.Tensor) and not dynamic_state(key)
    }
    return shape_problems(opts.out, expected, skip=dynamic_state)


def dynamic_state(key: str) -> bool:
    """A dynamic table's id-map state: saved per part when sharded (its shape depends on the
    plan), checked by the checkpoint loader itself (capacity, dim: docs/dynamic.md)."""
    return ".dynamic_tables." in key


def validate(opts: TrainOptions) -> tuple[list[str], RecDataset | None]:
    """All problems (one line each) and, when it loaded, the dataset.

    The dataset is loaded here, in the launcher, so a missing file is reported once; a
    download (MovieLens) also happens once, before the ranks start.
    """
    problems = number_problems(opts) + dynamic_problems(opts)
    problems += tier_flag_problems(opts)
    problems += backend_problems(opts, torch.cuda.device_count())
    problems += output_problems(opts)
    if problems:
        return problems, None
    try:
        dataset = build_dataset(opts)
    except (ValueError, FileNotFoundError, TypeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return [f"--dataset {opts.dataset}: {first}"], None
    problems = dataset_problems(opts, dataset) + resume_problems(opts, dataset)
    return problems + tier_store_problems(opts, dataset), dataset
