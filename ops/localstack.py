#!/usr/bin/env python3
"""The local stack's command line: `python ops/localstack.py up|down|status|jars|kafka-up|broker-stop|...`.

The stack itself is the package `ops/stack/` (`stack.cli` holds these commands; `--help` lists them).
"""

import sys
from pathlib import Path

# `python ops/localstack.py` puts ops/ on the path already; `python -P`, PYTHONSAFEPATH or a load by file path do not.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from stack.cli import main

if __name__ == "__main__":
    sys.exit(main())
