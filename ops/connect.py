#!/usr/bin/env python3
"""A Kafka Connect worker's command line: `python ops/connect.py jars|up|down|status`.

The worker is `ops/stack/connect.py` (`--help` lists the commands).
"""

import sys
from pathlib import Path

# `python ops/connect.py` puts ops/ on the path already; `python -P`, PYTHONSAFEPATH or a load by file path do not.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from stack.connect import main

if __name__ == "__main__":
    sys.exit(main())
