"""spark-submit entry point for the orders_current projection; flags are those of `outbox-projections run`."""

import sys

from projections.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "orders_current", *sys.argv[1:]]))
