"""The Kafka side of the bridge. `testing` holds in-memory stand-ins for fast tests: a publisher that
acknowledges what it is given, and a topic guard that accepts every topic."""
