"""The Kafka side of the bridge.

- `publisher`: the `Publisher` interface and `KafkaPublisher` (confluent-kafka), reporting each delivery
  by seq and finishing a discarded producer for good;
- `producer_settings`: the replication-safe librdkafka settings, and the checks of extra settings;
- `topics`: the topic guard that checks or creates a topic before its first use (`TopicChecker`);
- `reachability`: brokers out of reach said in one rate-limited line, not librdkafka's log every second;
- `partitioning`: the Java client's default partitioner, so keys land where JVM producers put them;
- `testing`: in-memory stand-ins (a publisher, an accepting topic guard) for fast tests.
"""
