"""OAuth providers in Hermes' JSON shape; client secrets masked on the way out unless asked not to."""

from __future__ import annotations

from typing import Any

from hermes.domain.api_json.fields import (
    SECRET_MASK,
    Json,
    read_int,
    read_object,
    read_str,
)
from hermes.domain.endpoint import HTTP_SCHEMES, EndpointAddress
from hermes.domain.names import validate_simple_name
from hermes.domain.oauth import OAuthProvider
from hermes.errors import ValidationError


def oauth_provider_from_json(data: Any) -> OAuthProvider:
    body = read_object(data, "oauthProvider")
    name = validate_simple_name(body.get("name"), "name")  # type: ignore[arg-type]
    endpoint = read_str(body, "tokenEndpoint", "", "tokenEndpoint")
    EndpointAddress.parse(endpoint, "tokenEndpoint", HTTP_SCHEMES)
    client_id = read_str(body, "clientId", "", "clientId")
    secret = read_str(body, "clientSecret", "", "clientSecret")
    if not client_id:
        raise ValidationError("is required", "clientId")
    if not secret:
        raise ValidationError("is required", "clientSecret")
    initial = read_int(body, "tokenRequestInitialDelay", 1000, "tokenRequestInitialDelay", 1, 3_600_000)
    return OAuthProvider(
        name=name,
        token_endpoint=endpoint,
        client_id=client_id,
        client_secret=secret,
        token_request_initial_delay=initial,
        token_request_max_delay=read_int(
            body, "tokenRequestMaxDelay", 30000, "tokenRequestMaxDelay", initial, 3_600_000
        ),
        request_timeout=read_int(body, "requestTimeout", 1000, "requestTimeout", 1, 300_000),
        socket_timeout=read_int(body, "socketTimeout", 0, "socketTimeout", 0, 300_000),
    )


def oauth_provider_to_json(provider: OAuthProvider, *, mask_secrets: bool = True) -> Json:
    return {
        "name": provider.name,
        "tokenEndpoint": provider.token_endpoint,
        "clientId": provider.client_id,
        "clientSecret": SECRET_MASK if mask_secrets else provider.client_secret,
        "tokenRequestInitialDelay": provider.token_request_initial_delay,
        "tokenRequestMaxDelay": provider.token_request_max_delay,
        "requestTimeout": provider.request_timeout,
        "socketTimeout": provider.socket_timeout,
    }
