"""A declarative serving appliance for vLLM on Tenstorrent accelerators."""

__version__ = "0.1.0"
