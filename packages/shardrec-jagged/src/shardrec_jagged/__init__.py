"""JaggedTensor, KeyedJaggedTensor and KeyedTensor: the value types every shardrec package speaks."""

__all__: list[str] = []
