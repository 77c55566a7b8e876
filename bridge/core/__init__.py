"""The never-skip core: pure logic, no I/O, property-tested.

- `holes`: the hole rule. Which gaps in the seq order a read may pass over as permanent, and which
  it must wait for (`HoleRule`, `Horizon`, `SeqRange`).
- `watermark`: the ack tracker (`AckTracker`), the one cursor: every seq is either tracked as sent
  or settled as a hole the reader reported, and the low watermark is what is safe to persist.
- `json_text`: the one verdict on JSON text (`parse_json`), shared by the writer and the bridge.
"""

from bridge.core.holes import Advance, HoleRule, Horizon, SeqRange
from bridge.core.watermark import AckTracker, TrackingError

__all__ = ["AckTracker", "Advance", "HoleRule", "Horizon", "SeqRange", "TrackingError"]
