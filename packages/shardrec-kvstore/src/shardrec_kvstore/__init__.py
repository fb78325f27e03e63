"""A raw-id row store on disk: RocksDB (`rocksdict`) keyed by int64 raw ids.

- `RocksRowStore` (store.py): batched multi-get / write-batch put of rows (weight and
  optimizer state), tuned for point lookups; scratch of a running job, never a checkpoint.
- `RowLayout` (layout.py): what a value holds; a store of another layout is refused.
"""

from shardrec_kvstore.layout import RowLayout, StoreLayoutError
from shardrec_kvstore.store import RocksRowStore, StoreAccessError, encode_keys, store_path

__all__ = [
    "RocksRowStore",
    "RowLayout",
    "StoreAccessError",
    "StoreLayoutError",
    "encode_keys",
    "store_path",
]
