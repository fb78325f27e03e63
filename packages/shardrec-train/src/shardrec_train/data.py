"""From the command's data flags to a `shardrec_data.RecDataset`."""

from __future__ import annotations

from shardrec_data import RecDataset, load_dataset
from shardrec_train.options import TrainOptions


def _value(text: str) -> object:
    """`--dataset-option` values: int, then float, then true/false, else the string."""
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def dataset_options(opts: TrainOptions) -> dict[str, object]:
    """The keyword options for `load_dataset`: `--dataset-option`s plus `--data-dir`."""
    options: dict[str, object] = {key: _value(value) for key, value in opts.dataset_options}
    if opts.data_dir is not None:
        options["data_dir"] = opts.data_dir
    if opts.raw_ids:
        options["raw_ids"] = True
    return options


def build_dataset(opts: TrainOptions) -> RecDataset:
    """`load_dataset(--dataset, ...)`; its ValueError / FileNotFoundError name the bad value."""
    return load_dataset(opts.dataset, **dataset_options(opts))
