"""What a term does apart in exactly-once delivery: where a new producer resumes, who leads before a rebuild, and
how a rewind lowers Kafka's progress before the stored watermark. And the line a rebuilt producer leaves, in
either delivery.

A restart resumes after the higher of the stored watermark and Kafka's last committed seq (the progress topic),
so a deliberate re-send (a rewind) must lower Kafka's first: lowered second, a kill between the two would
resume after the old progress and skip it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from bridge.errors import FencedError, TransientStoreError
from bridge.kafka.publisher import DeliveryFailure, Publisher
from bridge.kafka.transactional import ProgressMarking

log = logging.getLogger("bridge.daemon")


def committed_ahead(committed: Callable[[int], int | None], watermark: int) -> int | None:
    """The last seq Kafka committed when it is ahead of `watermark` (a crash after a commit, before the persist);
    None otherwise. `committed(watermark)` says it when above the watermark, and raises KafkaException when Kafka
    does not answer."""
    seq = committed(watermark)
    if seq is None or seq <= watermark:
        return None
    log.info("resuming after the last seq Kafka committed, above the watermark",
             extra={"committed_seq": seq, "watermark": watermark})
    return seq


def confirm_lease(renew: Callable[[], None], expired: Callable[[], bool], error: Callable[[str, Exception], None],
                  fenced_by: str | None) -> None:
    """Before a rebuild, renew the lease (`renew`), which says who leads; the rebuild's init_transactions may block
    for half the lease (a coordinator still loading), and a run of them must not let it lapse.

    Fenced by another producer of this transactional.id (`fenced_by`) and renewed: the fencer no longer leads (its
    init_transactions, begun before it froze past its lease, ended as it woke), and the rebuild's producer fences
    it back. Lost: FencedError, the term ends; so too when fenced and the lease cannot be renewed to tell whose."""
    try:
        renew()
    except TransientStoreError as exc:
        if fenced_by is not None:
            raise FencedError(f"fenced by a new leader's producer ({fenced_by}); the lease could not be renewed "
                              f"to tell whose: {exc}") from exc
        error("database", exc)
        if expired():
            raise FencedError(f"could not renew the lease: {exc}") from exc
        return
    except FencedError as exc:
        if fenced_by is None:
            raise
        raise FencedError(f"fenced by a new leader's producer ({fenced_by}); {exc}") from exc
    if fenced_by is not None:
        log.warning("fenced by a producer of an instance that no longer leads; this one still holds the lease, "
                    "and its new producer fences that one back", extra={"error": fenced_by})


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
