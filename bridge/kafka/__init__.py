"""The Kafka side of the bridge.

- `publisher`: the `Publisher` interface and `KafkaPublisher` (confluent-kafka), reporting each delivery
  by seq and finishing a discarded producer for good;
- `producer_settings`: the replication-safe librdkafka settings, and the checks of extra settings;
- `topics`: the topic guard that checks or creates a topic before its first use (`TopicChecker`);
- `access`: Kafka refusing the bridge's credentials, certificate or ACLs, as one error each with its exit code;
- `refusal_text`: the refusals librdkafka names only in its message text, read there and nowhere else;
- `reachability`: brokers out of reach said in one rate-limited line, not librdkafka's log every second;
- `partitioning`: the Java client's default partitioner, so keys land where JVM producers put them;
- `testing`: in-memory stand-ins (a publisher, an accepting topic guard) for fast tests.
"""
