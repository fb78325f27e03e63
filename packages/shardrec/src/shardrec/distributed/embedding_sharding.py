"""TorchRec path `torchrec.distributed.embedding_sharding`: the row bucketization before a
row-wise all-to-all and the per-table sharding info (shardrec_sharding)."""

from shardrec_sharding import EmbeddingShardingInfo
from shardrec_sharding.bucketize import bucketize_kjt_before_all2all

__all__ = ["EmbeddingShardingInfo", "bucketize_kjt_before_all2all"]
