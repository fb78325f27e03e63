"""Composable sharding (TorchRec path `torchrec.distributed.shard`)."""

from shardrec_dmp import shard_modules

__all__ = ["shard_modules"]
