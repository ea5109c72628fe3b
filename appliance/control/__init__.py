"""The control API on top of the runtime, its typed documents, and the one client everything else uses."""
