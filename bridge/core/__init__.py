"""The never-skip core: pure logic, no I/O, property-tested.

- `holes`: the hole rule. Which gaps in the seq order a read may pass over as permanent, and which
  it must wait for (`HoleRule`, `Horizon`, `SeqRange`).
- `watermark`: the ack tracker (`AckTracker`), the one cursor: every seq is either tracked as sent
  or settled as a hole the reader reported, and the low watermark is what is safe to persist.
- `json_text`: the one verdict on JSON text (`parse_json`), shared by the writer and the bridge.
- `records`: an outbox row (`OutboxRow`) and its Kafka record (`build_record`, `dead_letter_record`);
  `cloudevents`: the same record as a CloudEvent in binary content mode (`build_cloudevent`).
- `late`: holes settled earlier, remembered so a row that appears in one is found (`SettledHoles`).
- `refusals`: the state machine for records Kafka refuses (suspects sent alone, culprits to the policy).
"""

from bridge.core.holes import Advance, HoleRule, Horizon, SeqRange
from bridge.core.watermark import AckTracker, TrackingError

__all__ = ["AckTracker", "Advance", "HoleRule", "Horizon", "SeqRange", "TrackingError"]
