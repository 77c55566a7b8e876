"""The benchmark suite behind `make bench`: measured numbers for the bridge and the projections.

Each benchmark is one module (`b1_throughput` ... `b7_memory`) with a `run(ctx)` that returns a plain
dict of results; `bench.run` runs them, stores `bench/results/latest.json` and the plots, and
regenerates `docs/BENCHMARKS.md`. Every throughput is reported beside a ceiling measured in the same
run (`bench.ceiling`), because the machine is shared and absolute numbers drift.
"""
