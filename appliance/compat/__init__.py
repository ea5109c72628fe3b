"""Stage 2, validate: the compatibility matrix (models/), the plugin's launch contract, validation."""
