"""Stage 4, supervise: the engine's lifecycle, its supervisor, its log, sd_notify."""
