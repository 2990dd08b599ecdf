"""The training decisions (parameter dtype, ZeRO stage per variable group,
recompute, microbatches) and their search around the layout program."""
