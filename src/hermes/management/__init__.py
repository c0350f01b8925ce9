"""The management API: groups, topics, subscriptions, OAuth providers and operations."""
