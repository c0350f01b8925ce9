"""The Hermes JSON shape of groups, topics, subscriptions and OAuth providers: the REST API's, not a Kafka codec.

One translation, used both by the management API (requests and responses) and by the metadata
repositories (what they store). Parsing validates every field and raises ``ValidationError`` naming the
field; rendering with ``mask_secrets`` hides passwords and client secrets.
"""

from hermes.domain.api_json.fields import SECRET_MASK
from hermes.domain.api_json.oauth_providers import oauth_provider_from_json, oauth_provider_to_json
from hermes.domain.api_json.stored import stored_subscription_to_json, stored_topic_to_json
from hermes.domain.api_json.subscriptions import filters_from_json, subscription_from_json, subscription_to_json
from hermes.domain.api_json.topics import check_owner_named, topic_from_json, topic_to_json

__all__ = [
    "SECRET_MASK",
    "check_owner_named",
    "filters_from_json",
    "oauth_provider_from_json",
    "oauth_provider_to_json",
    "stored_subscription_to_json",
    "stored_topic_to_json",
    "subscription_from_json",
    "subscription_to_json",
    "topic_from_json",
    "topic_to_json",
]
