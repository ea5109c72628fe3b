"""Side area: engine environments — build recipes, pins, the probe run inside them, manifests, upgrades."""
