"""Several models on one host: slots files, whole-host validation, per-slot plans and serving."""
