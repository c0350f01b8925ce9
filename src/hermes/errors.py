"""One error tree for the whole system.

Every error carries a stable ``code`` (Hermes' ``ErrorCode`` names where Hermes has one) and the HTTP
``status`` the APIs answer with, so HTTP layers map any ``HermesError`` to ``{"message", "code"}`` without
knowing its class. ``retriable`` tells callers whether trying again later can succeed.
"""

from __future__ import annotations

from typing import Any


class HermesError(Exception):
    code = "INTERNAL_ERROR"
    status = 500
    retriable = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_body(self) -> dict[str, str]:
        return {"message": self.message, "code": self.code}


class ValidationError(HermesError):
    """The request is malformed; ``message`` names the offending field."""

    code = "VALIDATION_ERROR"
    status = 400

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


class FormattingError(ValidationError):
    """The body could not be parsed at all (bad JSON, wrong shape)."""

    code = "FORMAT_ERROR"


class InvalidQuery(ValidationError):
    """A query of Hermes' query language that cannot be parsed."""

    code = "INVALID_QUERY"


class OwnerSourceWithoutAutocomplete(ValidationError):
    """A search of an owner source that only takes typed ids (Hermes' ``Plaintext``)."""

    code = "OWNER_SOURCE_DOESNT_SUPPORT_AUTOCOMPLETE"


class OffsetsNotMovable(ValidationError):
    """A retransmission asked of a subscription no consumer has run yet (PENDING), as Hermes refuses it."""

    code = "MOVING_SUBSCRIPTION_OFFSETS_VALIDATION_ERROR"


class StoredEntityInvalid(ValidationError):
    """A stored topic or subscription that fails today's validation (stored by an older version before a rule was
    added, or edited in the store by hand). No role serves it; the management API shows ``stored`` (its JSON as
    stored) and a PUT that makes it valid replaces it. Made by ``of``: ``entity``, e.g. ``subscription g.t$s``;
    ``name``, its own (``s``); ``reason``, what validation says, naming the field. The client reads back the
    message only."""

    code = "STORED_ENTITY_INVALID"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message, field)
        self.entity = self.name = self.reason = ""
        self.stored: dict[str, Any] = {}

    @classmethod
    def of(cls, entity: str, name: str, stored: dict[str, Any], problem: ValidationError) -> StoredEntityInvalid:
        invalid = cls(f"{entity} as stored is invalid ({problem.message}): correct it with a PUT")
        invalid.field, invalid.entity, invalid.name = problem.field, entity, name
        invalid.stored, invalid.reason = stored, problem.message
        return invalid


class NotFoundError(HermesError):
    code = "NOT_FOUND"
    status = 404


class GroupNotFound(NotFoundError):
    code = "GROUP_NOT_EXISTS"


class TopicNotFound(NotFoundError):
    code = "TOPIC_NOT_EXISTS"


class SubscriptionNotFound(NotFoundError):
    code = "SUBSCRIPTION_NOT_EXISTS"
    status = 400  # Hermes' ErrorCode answers an unknown subscription with 400, and its clients expect it


class OffloadedMessageNotFound(NotFoundError):
    """An offloaded message that is unknown, expired with its topic's retention, or deleted with its topic."""

    code = "OFFLOADED_MESSAGE_NOT_FOUND"


class DeadLetterNotFound(NotFoundError):
    """A dead-letter id the subscription's dead-letter topic does not hold (any more)."""

    code = "DEAD_LETTER_NOT_EXISTS"


class DeadLettersOfUnknownSubscription(NotFoundError):
    """The dead letters of a subscription that does not exist: a 404 on our dead-letter paths, which no Hermes
    client knows (Hermes' own subscription paths answer 400)."""

    code = "SUBSCRIPTION_NOT_EXISTS"


class OAuthProviderNotFound(NotFoundError):
    code = "OAUTH_PROVIDER_NOT_EXISTS"


class SchemaNotFound(NotFoundError):
    code = "SCHEMA_NOT_EXISTS"


class OwnerSourceNotFound(NotFoundError):
    code = "OWNER_SOURCE_NOT_FOUND"


class ImplementationAbsent(NotFoundError):
    """An optional Hermes integration (metrics dashboards, offline clients) this installation does not have."""

    code = "IMPLEMENTATION_ABSENT"


class Unauthorized(HermesError):
    """The caller did not prove who it is: no credentials, or wrong ones. The message never repeats them."""

    code = "UNAUTHORIZED"
    status = 401


class InvalidSignature(Unauthorized):
    """A delivery a subscriber got that no secret it holds signed, or signed too long ago (``hermes.client``)."""

    code = "INVALID_SIGNATURE"


class Forbidden(HermesError):
    """The caller is known but may not do this (as Hermes' ``PERMISSION_DENIED``)."""

    code = "PERMISSION_DENIED"
    status = 403


class PublishingForbidden(Forbidden):
    """The topic's ``auth`` does not let this caller (or a caller without credentials) publish, as Hermes'."""

    code = "AUTH_ERROR"


class InternalTopicProtected(Forbidden):
    """A Kafka topic Hermes itself owns (message tracking, large-message discovery, idempotency keys) is never
    created, changed or deleted through the API; its topic of subscription events is never deleted."""


class TooManyFailedLogins(HermesError):
    """A client failed to authenticate too often; it must wait before it may try again."""

    code = "TOO_MANY_FAILED_LOGINS"
    status = 429
    retriable = True

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class AlreadyExistsError(HermesError):
    code = "ALREADY_EXISTS"
    status = 400  # as Hermes' ErrorCode: its clients test for 400


class GroupAlreadyExists(AlreadyExistsError):
    code = "GROUP_ALREADY_EXISTS"


class TopicAlreadyExists(AlreadyExistsError):
    code = "TOPIC_ALREADY_EXISTS"


class SubscriptionAlreadyExists(AlreadyExistsError):
    code = "SUBSCRIPTION_ALREADY_EXISTS"


class OAuthProviderAlreadyExists(AlreadyExistsError):
    code = "OAUTH_PROVIDER_ALREADY_EXISTS"


class IdempotencyKeyReused(HermesError):
    """A publish's Idempotency-Key was used, within its topic's window, for a message with another body."""

    code = "IDEMPOTENCY_KEY_REUSED"
    status = 422


class ConflictError(HermesError):
    """The operation contradicts the current state (e.g. deleting a group that still has topics). Hermes
    answers these 403."""

    code = "CONFLICT"
    status = 403


class GroupNotEmpty(ConflictError):
    code = "GROUP_NOT_EMPTY"


class TopicNotEmpty(ConflictError):
    code = "TOPIC_NOT_EMPTY"


class OperationDisabled(HermesError):
    """What this installation does not allow (as Hermes' ``OPERATION_DISABLED``: removing a schema, or any
    change while the management API is read-only)."""

    code = "OPERATION_DISABLED"
    status = 406


class PayloadTooLarge(HermesError):
    code = "MESSAGE_TOO_LARGE"
    status = 413


class RequestTimeout(HermesError):
    """The client did not send its request within the port's deadlines (http/edge.py)."""

    code = "REQUEST_TIMEOUT"
    status = 408


class UnsupportedMediaType(HermesError):
    code = "UNSUPPORTED_MEDIA_TYPE"
    status = 415


class ApiRefused(HermesError):
    """An answer of the management or publishing API other than a success, as the web console shows it to its
    user: the API's own status, code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class ServiceUnavailable(HermesError):
    code = "SERVICE_UNAVAILABLE"
    status = 503
    retriable = True


class BrokerUnavailable(ServiceUnavailable):
    """The Kafka cluster cannot be reached or did not answer in time."""

    code = "BROKER_UNAVAILABLE"


class BrokerError(HermesError):
    """The broker answered with an error that is not an outage (e.g. an unsupported operation)."""

    code = "BROKER_ERROR"


class MetadataUnavailable(ServiceUnavailable):
    code = "METADATA_UNAVAILABLE"


class MetadataUnreachable(MetadataUnavailable):
    """The metadata store (ZooKeeper) cannot be reached now; ``retry_after``: seconds before trying again is
    worth it (the answer's ``Retry-After``)."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class UndeliverableMessage(HermesError):
    """A message no attempt can deliver (its Avro body cannot be converted for the subscriber): discarded at
    once, with this reason."""


class EndpointResolutionError(HermesError):
    """An endpoint address resolver could not name the addresses to send to (bad metadata, lookup failure).
    The attempt fails and is retried like a network error."""

    code = "ENDPOINT_RESOLUTION_ERROR"
    retriable = True


class OAuthTokenUnavailable(HermesError):
    """No OAuth token could be obtained for a subscription (provider missing, token endpoint down or refusing).
    The message says why without any secret; the delivery is retried."""

    code = "OAUTH_TOKEN_UNAVAILABLE"
    status = 502
    retriable = True


class StartupError(HermesError):
    """A process cannot start (port taken, data directory not writable, ...). Printed without a traceback."""

    code = "STARTUP_ERROR"


class UsageError(HermesError):
    """The command line, a setting or the config file is wrong: an unknown flag, a value out of range, a missing
    file. The message names the flag, environment variable or file key, one line per problem; exit code 2."""

    code = "USAGE_ERROR"


class EndpointProtocolError(HermesError):
    """A subscriber's endpoint answered with something that is not HTTP/1.1, or closed before answering."""

    code = "ENDPOINT_PROTOCOL_ERROR"
    status = 502
    retriable = True
