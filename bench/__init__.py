"""Measurements that print figures (`make bench`, `make soak`): run as scripts, never shipped or imported by the
appliance; a package so mypy and the tests name each script as `bench.<name>`."""
