"""The subscription policy's retry rules (our extension): ``statusRules``, ``backoffJitter`` and
``stopRetryHeaderAllowed``, each left out of the JSON at its default so that Hermes' shape is unchanged."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hermes.domain.api_json.fields import Json, as_int, read_bool, read_enum, read_objects
from hermes.domain.retry_rules import (
    MAX_RULE_DELAY_MS,
    MAX_STATUS_RULES,
    BackoffJitter,
    RetryRules,
    RuleAction,
    StatusRule,
    status_range,
)
from hermes.errors import ValidationError

_POLICY = "subscriptionPolicy."
_RULES = _POLICY + "statusRules"


def retry_rules_from_json(policy: Mapping[str, Any], http: bool) -> RetryRules:
    """The rules of a subscription policy; those about HTTP answers only for an ``http`` endpoint."""
    rules = _status_rules(policy.get("statusRules"))
    allowed = read_bool(policy, "stopRetryHeaderAllowed", False, _POLICY + "stopRetryHeaderAllowed")
    if not http:
        if rules:
            raise ValidationError("is not available with a jms:// endpoint", _RULES)
        if allowed:
            raise ValidationError("is not available with a jms:// endpoint", _POLICY + "stopRetryHeaderAllowed")
    jitter = read_enum(policy, "backoffJitter", BackoffJitter, BackoffJitter.NONE, _POLICY + "backoffJitter")
    return RetryRules(rules, jitter, allowed)


def _status_rules(value: Any) -> tuple[StatusRule, ...]:
    items = read_objects(value, _RULES)
    if len(items) > MAX_STATUS_RULES:
        raise ValidationError(f"must be at most {MAX_STATUS_RULES} rules", _RULES)
    rules: list[StatusRule] = []
    covered: set[int] = set()  # the statuses earlier rules match
    for field, item in items:
        status, first, last = _status(item.get("status"), field + ".status")
        if first > last:
            raise ValidationError(f"ends before it starts ({status})", field + ".status")
        statuses = set(range(first, last + 1)) - set(range(200, 300))
        if not statuses:
            raise ValidationError("never matches: a 2xx answer is a delivery", field + ".status")
        if statuses <= covered:
            raise ValidationError("never matches: earlier rules match all of its statuses", field + ".status")
        covered |= statuses
        if item.get("action") is None:
            raise ValidationError(f"is required ({', '.join(RuleAction)})", field + ".action")
        action = read_enum(item, "action", RuleAction, RuleAction.RETRY, field + ".action")
        delay = item.get("delay")
        if action is RuleAction.RETRY_AFTER:
            if delay is None:
                raise ValidationError("is required with RETRY_AFTER (millis before the retry)", field + ".delay")
            delay = as_int(delay, field + ".delay", 0, MAX_RULE_DELAY_MS)
        elif delay is not None:
            raise ValidationError("is only for RETRY_AFTER", field + ".delay")
        rules.append(StatusRule(status, first, last, action, delay))
    return tuple(rules)


def _status(value: Any, field: str) -> tuple[str, int, int]:
    """A rule's status as written (an integer is taken for its digits, "5XX" for "5xx"), its first and last."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    found = status_range(value) if isinstance(value, str) else None
    if found is None:
        raise ValidationError('must be a status from 100 to 599 ("409"), a range ("400-499") or a class ("5xx")', field)
    return value.lower(), *found


def retry_rules_to_json(rules: RetryRules) -> Json:
    """The policy fields of ``rules`` that are not at their default."""
    out: Json = {}
    if rules.status_rules:
        out["statusRules"] = [
            {"status": r.status, "action": r.action.value, **({} if r.delay is None else {"delay": r.delay})}
            for r in rules.status_rules
        ]
    if rules.backoff_jitter is not BackoffJitter.NONE:
        out["backoffJitter"] = rules.backoff_jitter.value
    if rules.stop_retry_header_allowed:
        out["stopRetryHeaderAllowed"] = True
    return out
