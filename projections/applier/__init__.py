"""The batch applier: the foreachBatch function of a projection's streaming query (`BatchApplier`), and the
apply paths it applies each micro-batch by, one chosen per query from what its kind declares (`streaming_path`).
"""

from projections.applier.batch_function import BatchApplier
from projections.applier.paths import BELOW_GUESS_TXN, ApplyPath, FromGuess, OnePass, TwoPass, streaming_path

__all__ = ["BELOW_GUESS_TXN", "ApplyPath", "BatchApplier", "FromGuess", "OnePass", "TwoPass", "streaming_path"]
