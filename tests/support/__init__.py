"""Test support: real services (a Kafka broker) started for tests, and their fixtures."""
