"""Kafka helpers of the acker: a real local Apache Kafka broker for tests, benchmarks and demos."""
