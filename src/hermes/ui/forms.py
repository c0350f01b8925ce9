"""From a page's form to the API's JSON body. Numbers that do not parse are sent as they were typed, so that
the API's own validation message (naming the field) is what the user reads."""

from __future__ import annotations

from typing import Any

from multidict import MultiDictProxy


def text(form: MultiDictProxy[Any], name: str) -> str:
    return str(form.get(name, "")).strip()


def number(form: MultiDictProxy[Any], name: str) -> Any:
    return typed(text(form, name))


def typed(value: str) -> Any:
    """The number typed, or the text as typed."""
    try:
        return int(value)
    except ValueError:
        try:
            return float(value)
        except ValueError:
            return value


def checked(form: MultiDictProxy[Any], name: str) -> bool:
    return form.get(name) is not None


def owner(form: MultiDictProxy[Any]) -> dict[str, str]:
    return {"source": "Plaintext", "id": text(form, "owner")}


def topic_body(form: MultiDictProxy[Any]) -> dict[str, Any]:
    return {
        "description": text(form, "description"),
        "owner": owner(form),
        "ack": text(form, "ack") or "LEADER",
        "retentionTime": {"duration": number(form, "retention"), "retentionUnit": text(form, "retentionUnit")},
        "maxMessageSize": number(form, "maxMessageSize"),
        "trackingEnabled": checked(form, "trackingEnabled"),
        "offlineStorage": {  # the whole object: a change replaces it
            "enabled": checked(form, "offlineStorage"),
            "retentionTime": {"duration": number(form, "offlineRetentionDays"), "infinite": checked(form, "forever")},
        },
    }


def subscription_body(form: MultiDictProxy[Any]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "endpoint": text(form, "endpoint"),
        "description": text(form, "description"),
        "owner": owner(form),
        "contentType": text(form, "contentType") or "JSON",
        "deliveryType": text(form, "deliveryType") or "SERIAL",
        "mode": text(form, "mode") or "ANYCAST",
        "trackingMode": "trackAll" if checked(form, "tracking") else "trackingOff",
    }
    policy: dict[str, Any] = {
        "statusRules": status_rules(form),
        "backoffJitter": text(form, "backoffJitter") or "NONE",
        "stopRetryHeaderAllowed": checked(form, "stopRetryHeaderAllowed"),
    }
    if body["deliveryType"] == "SERIAL":
        policy.update({name: number(form, name) for name in ("rate", "messageTtl", "requestTimeout")})
        policy["retryClientErrors"] = checked(form, "retryClientErrors")
        threshold = text(form, "parkingThresholdMs")  # blank: no parking (null turns it off)
        policy["retryParking"] = {"thresholdMs": number(form, "parkingThresholdMs")} if threshold else None
    body["subscriptionPolicy"] = policy
    body["deadLetters"] = {"enabled": checked(form, "deadLetters")}
    body["circuitBreaker"] = circuit_breaker(form)
    return body


def status_rules(form: MultiDictProxy[Any]) -> list[dict[str, Any]]:
    """The rows of the status rules table: one with a status is a rule; a blank delay is left out."""
    rows = zip(form.getall("ruleStatus", []), form.getall("ruleAction", []), form.getall("ruleDelay", []), strict=False)
    rules = []
    for status, action, delay in rows:
        if str(status).strip():
            rule = {"status": str(status).strip(), "action": str(action).strip()}
            if str(delay).strip():
                rule["delay"] = typed(str(delay).strip())
            rules.append(rule)
    return rules


RULE_ACTIONS = ("RETRY", "RETRY_AFTER", "DISCARD", "DEAD_LETTER")  # of subscriptionPolicy.statusRules
BREAKER_FIELDS = (  # circuitBreaker's fields, with the form's labels
    ("consecutiveFailures", "Opens after failures in a row"),
    ("failureRatio", "or a failure ratio (0.01-1)"),
    ("window", "over a window (ms)"),
    ("minimumRequests", "of at least (attempts)"),
    ("probeInterval", "Probe every (ms)"),
    ("suspendAfter", "Suspend when open for (ms)"),
)


def circuit_breaker(form: MultiDictProxy[Any]) -> dict[str, Any] | None:
    """None (no breaker) unless ticked; a blank field is left to the API's default."""
    if not checked(form, "circuitBreaker"):
        return None
    return {name: number(form, f"breaker.{name}") for name, _ in BREAKER_FIELDS if text(form, f"breaker.{name}")}
