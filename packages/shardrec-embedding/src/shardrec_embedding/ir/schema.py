"""JSON-able descriptions of the serialized modules (TorchRec's `torchrec.ir.schema`).

Each is a plain dataclass of JSON types (enums as their string values), so
`dataclasses.asdict` gives the dict stored in the exported program and `Cls(**d)` reads it
back. TorchRec's names and fields; the embedding-collection and quantized-collection records
are ours (TorchRec 1.8 serializes only pooled float collections).
"""

from dataclasses import dataclass

__all__ = [
    "EBCMetadata",
    "ECMetadata",
    "EmbeddingBagConfigMetadata",
    "EmbeddingConfigMetadata",
    "FPEBCMetadata",
    "KTRegroupAsDictMetadata",
    "PositionWeightedModuleCollectionMetadata",
    "PositionWeightedModuleMetadata",
    "QuantEBCMetadata",
    "QuantECMetadata",
]


@dataclass
class EmbeddingBagConfigMetadata:
    """An `EmbeddingBagConfig` without its init function (`data_type`, `pooling`: enum values)."""

    num_embeddings: int
    embedding_dim: int
    name: str
    data_type: str
    feature_names: list[str]
    weight_init_max: float | None
    weight_init_min: float | None
    need_pos: bool
    pooling: str


@dataclass
class EmbeddingConfigMetadata:
    """An `EmbeddingConfig` without its init function (`data_type`: the enum value)."""

    num_embeddings: int
    embedding_dim: int
    name: str
    data_type: str
    feature_names: list[str]
    weight_init_max: float | None
    weight_init_min: float | None
    need_pos: bool


@dataclass
class EBCMetadata:
    tables: list[EmbeddingBagConfigMetadata]
    is_weighted: bool
    device: str | None


@dataclass
class ECMetadata:
    tables: list[EmbeddingConfigMetadata]
    need_indices: bool
    device: str | None


@dataclass
class QuantEBCMetadata:
    """`output_dtype`: the torch dtype's name (`"float32"`, `"float16"`)."""

    tables: list[EmbeddingBagConfigMetadata]
    is_weighted: bool
    output_dtype: str
    device: str | None


@dataclass
class QuantECMetadata:
    tables: list[EmbeddingConfigMetadata]
    need_indices: bool
    output_dtype: str
    device: str | None


@dataclass
class FPEBCMetadata:
    is_fp_collection: bool
    features: list[str]


@dataclass
class PositionWeightedModuleMetadata:
    max_feature_length: int


@dataclass
class PositionWeightedModuleCollectionMetadata:
    max_feature_lengths: list[tuple[str, int]]


@dataclass
class KTRegroupAsDictMetadata:
    groups: list[list[str]]
    keys: list[str]
    emb_dtype: str | None
