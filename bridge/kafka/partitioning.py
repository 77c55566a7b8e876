"""Kafka's default key partitioning (the Java client's murmur2), in pure Python.

librdkafka's `murmur2_random` partitioner hashes keys the same way, so these functions let tests
and tools predict where the bridge puts a key and check co-partitioning with JVM producers.
"""

from __future__ import annotations

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Return `org.apache.kafka.common.utils.Utils.murmur2(data)` as the signed 32-bit int Java returns."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    body = length - length % 4
    for i in range(0, body, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    # The Java switch falls through: 3 trailing bytes fold in bytes 2, 1 and 0, then multiply once.
    tail = length % 4
    if tail == 3:
        h ^= data[body + 2] << 16
    if tail >= 2:
        h ^= data[body + 1] << 8
    if tail >= 1:
        h ^= data[body]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Java's `Utils.toPositive`: clear the sign bit (not `abs`, so `Integer.MIN_VALUE` maps to 0)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """Return the partition the Java default partitioner (and librdkafka `murmur2_random`) picks for key."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions
