"""Abstract test suites, one per interface; each backend's tests subclass them."""
