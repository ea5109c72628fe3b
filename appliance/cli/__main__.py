"""`python -m appliance.cli`: the same entry point as the `appliance` console script."""

import sys

from appliance.cli.main import script

sys.exit(script())
