"""The broker adapter: the only package that imports ``confluent_kafka``."""
