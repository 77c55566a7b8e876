"""Where a Spark micro-batch's time goes, the projection beside the bare MERGE: the table B5 and B6 show.

Three sources meet in it: Spark's progress report (the parts of a micro-batch), the projection's own steps
inside foreachBatch (its `batch applied` log line) and Delta's MERGE metrics (the table history).
"""

from __future__ import annotations

from typing import Any

#: Spark's names for the parts of a micro-batch, as the report says them.
SPARK_PHASES = {
    "latestOffset": "find new offsets (latestOffset)",
    "walCommit": "offset log write (walCommit)",
    "queryPlanning": "planning (queryPlanning)",
    "getBatch": "get the batch (getBatch)",
    "addBatch": "the sink: foreachBatch (addBatch)",
    "commitOffsets": "commit log write (commitOffsets)",
    "triggerExecution": "whole micro-batch (triggerExecution)",
}
APPLIER_STEPS = {
    "read_decode_apply": "one pass: read from Kafka, decode, count (streaming observation) and the kind's MERGE",
    "read_decode_merge": "one pass: read from Kafka, decode, count (streaming observation) and the kind's MERGE "
                         "from a guessed low seq",
    "merge_below_guess": "second pass: the kind's MERGE of the events below the guessed low seq",
    "read_decode_stats": "read from Kafka, decode, cache and count (`_stats`, one Spark job)",
    "quarantine": "quarantine the malformed",
    "horizon": "deduplication horizon check",
    "kind_apply": "the kind's MERGE (`Kind.apply`)",
    "prune": "prune deduplication state",
    "progress_record": "progress record",
}


def profile_lines(what: str, profile: dict[str, Any]) -> list[str]:
    """Where the time of `what` goes: mean seconds per batch with rows, projection beside the bare MERGE."""
    spark, merge = profile["spark"], profile["merge"]
    lines = [
        "",
        f"Where {what}'s time goes (mean seconds per batch with rows; Spark's progress report, the projection's "
        "own steps from its `batch applied` log line, and Delta's MERGE metrics from the table history):",
        "",
        "| part | projection s | bare MERGE s |",
        "|---|---|---|",
    ]
    for name, label in SPARK_PHASES.items():
        lines.append(f"| {label} | {spark['projection'].get(name, 0)} | {spark['baseline'].get(name, 0)} |")
    for name, label in APPLIER_STEPS.items():
        if name in profile["applier"]:
            lines.append(f"| inside foreachBatch: {label} | {profile['applier'][name]} | |")
    p, q = merge["projection"], merge["baseline"]
    lines += [
        f"| Delta MERGE: whole (executionTimeMs) | {p['execution_s']} | {q['execution_s']} |",
        f"| Delta MERGE: finding the files to touch (scanTimeMs) | {p['scan_s']} | {q['scan_s']} |",
        f"| Delta MERGE: rewriting them (rewriteTimeMs) | {p['rewrite_s']} | {q['rewrite_s']} |",
        f"| Delta MERGE: files removed / added per MERGE | {p['files_removed']} / {p['files_added']} | "
        f"{q['files_removed']} / {q['files_added']} |",
        f"| MERGEs | {p['merges']} | {q['merges']} |",
    ]
    return lines
