"""The control API on top of the runtime: its routes and typed documents."""
