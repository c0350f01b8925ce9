"""Hermes for Python: a message broker for services that speak HTTP."""

__version__ = "0.1.0"
