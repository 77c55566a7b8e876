"""spark-submit entry point for the order_events_per_minute projection.

Flags are those of `outbox-projections run`; see projections/jobs/__init__.py for the command line.
"""

import sys

from projections.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "order_events_per_minute", *sys.argv[1:]]))
