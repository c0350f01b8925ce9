"""A Python client of Hermes' public APIs (ours and Hermes' own): publishing, management, and helpers for
subscribers (``hermes.client.subscriber``). It imports nothing of the broker: install the package and talk to a
broker anywhere. Errors are ``hermes.errors`` types carrying the API's message."""

from hermes.client.asynchronous import AsyncHermesClient
from hermes.client.connection import Connection
from hermes.client.responses import PublishResult
from hermes.client.retries import RetryPolicy
from hermes.client.sync import HermesClient

__all__ = ["AsyncHermesClient", "Connection", "HermesClient", "PublishResult", "RetryPolicy"]
