"""A real child process that prints a recorded engine log, then keeps running like a device init that retries.

The fault-ladder tests use it for device faults no machine here can produce: the lines are the
public record's (testkit/data/faults/recorded-lines.tsv) or a recorded log file.
"""

from __future__ import annotations

import sys
import time

if __name__ == "__main__":
    print("INFO Starting to load model replay...", flush=True)
    with open(sys.argv[1]) as recorded:
        for line in recorded:
            print(line.rstrip("\n"), flush=True)
    time.sleep(3600)
