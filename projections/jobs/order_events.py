"""spark-submit entry point for the order_events projection; flags are those of `outbox-projections run`."""

import sys

from projections.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "order_events", *sys.argv[1:]]))
