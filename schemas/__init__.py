"""Avro schemas of the acker topic and the outcome topics, installed as the package ``acker.schemas``."""
