"""spark-submit entry point for any declared projection: `spark-submit projections/jobs/run.py NAME ...`."""

import sys

from projections.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
