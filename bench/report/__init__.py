"""`docs/BENCHMARKS.md`, generated from `bench/results/latest.json`: every number beside its target and ceiling.

The numbers and verdicts are generated; the analysis (why a target is missed, what the profile says, what to
change) is the hand-written `bench/analysis.md`, included as it is and labelled with the run it was written
against. `render` writes the whole report (`document`); each benchmark has a module that writes its rows of
the summary and its section (`b1_throughput` ... `b8_rows`, named as the benchmarks that measure them), from
the cells all sections share (`cells`); the targets themselves are `bench.targets`.
"""

from bench.report.document import render

__all__ = ["render"]
