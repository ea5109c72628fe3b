"""Widgets of the console; each shows one part of an ApplianceView."""
