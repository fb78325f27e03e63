"""The engines of the sharding strategies; `shardrec_sharding.registry` describes each sharding
type as one engine with its type bound."""
