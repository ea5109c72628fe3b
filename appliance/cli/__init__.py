"""The `appliance` command line: one module per command group, the only code that prints or exits."""

from appliance.cli.main import main

__all__ = ["main"]
