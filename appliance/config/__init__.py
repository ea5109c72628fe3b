"""Stage 1, compose: the frozen config types, Hydra composition with provenance, `auto` resolution, sites."""
