"""spark-submit entry point for the orders_history projection; flags are those of `outbox-projections run`."""

import sys

from projections.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "orders_history", *sys.argv[1:]]))
