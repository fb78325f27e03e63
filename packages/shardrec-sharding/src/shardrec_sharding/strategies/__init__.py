"""One module per sharding type; `shardrec_sharding.registry` maps types to them."""
