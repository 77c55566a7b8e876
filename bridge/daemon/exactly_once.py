"""What a term does apart in exactly-once delivery: where a new producer resumes, and how a rewind lowers Kafka's
progress before the stored watermark. And the line a rebuilt producer leaves, in either delivery.

A restart resumes after the higher of the stored watermark and Kafka's last committed seq (the progress topic),
so a deliberate re-send (a rewind) must lower Kafka's first: lowered second, a kill between the two would
resume after the old progress and skip it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from bridge.kafka.publisher import DeliveryFailure, Publisher
from bridge.kafka.transactional import ProgressMarking

log = logging.getLogger("bridge.daemon")


def committed_ahead(committed: Callable[[], int | None], watermark: int) -> int | None:
    """The last seq Kafka committed when it is ahead of `watermark` (a crash after a commit, before the persist);
    None otherwise. `committed` raises KafkaException when Kafka does not answer."""
    seq = committed()
    if seq is None or seq <= watermark:
        return None
    log.info("resuming after the last seq Kafka committed, above the watermark",
             extra={"committed_seq": seq, "watermark": watermark})
    return seq


def mark_rewind(publisher: Publisher, to: int, watermark: int) -> bool:
    """Commit Kafka's progress at `to` with `publisher` (a new one), before a rewind to `to` is stored."""
    assert isinstance(publisher, ProgressMarking), "exactly-once delivery takes a transactional publisher"
    if publisher.mark_progress(to):
        log.info("rewinding: Kafka's progress lowered first, what follows is sent again on purpose",
                 extra={"rewind_to": to, "watermark": watermark})
        return True
    failure = publisher.failure
    log.warning("could not lower Kafka's progress for a rewind; rewinding at the next checkpoint",
                extra={"rewind_to": to, "error": failure.reason if failure is not None else None})
    return False


def log_rebuild(failure: DeliveryFailure, unanswered: int, watermark: int, suspects: Sequence[int],
                refused: Sequence[int]) -> str:
    """Say why the producer is rebuilt, and return it as the status's last error. A producer that failed with no
    record of its own and none unanswered lost nothing (in exactly-once delivery, typically its transactions not
    yet started while the broker still aborted a dead leader's): a warning, not a failed delivery."""
    if failure.seq is None and not unanswered:
        log.warning("the producer failed before it carried a record; making a new one",
                    extra={"error": failure.reason, "watermark": watermark})
        return f"the producer failed: {failure.reason}"
    log.error("delivery failed; rebuilding the producer and rewinding to the watermark",
              extra={"seq": failure.seq, "error": failure.reason, "watermark": watermark,
                     "suspect_seqs": list(suspects), "refused_seqs": refused})
    return f"delivery of seq {failure.seq} failed: {failure.reason}"
