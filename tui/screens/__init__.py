"""Screens of the console: one per mode, plus the confirmation dialog."""
