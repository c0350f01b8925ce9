"""From a page's form to the API's JSON body. Numbers that do not parse are sent as they were typed, so that
the API's own validation message (naming the field) is what the user reads."""

from __future__ import annotations

from typing import Any

from multidict import MultiDictProxy


def text(form: MultiDictProxy[Any], name: str) -> str:
    return str(form.get(name, "")).strip()


def number(form: MultiDictProxy[Any], name: str) -> Any:
    value = text(form, name)
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
    if body["deliveryType"] == "SERIAL":
        body["subscriptionPolicy"] = {name: number(form, name) for name in ("rate", "messageTtl", "requestTimeout")}
        body["subscriptionPolicy"]["retryClientErrors"] = checked(form, "retryClientErrors")
    return body
