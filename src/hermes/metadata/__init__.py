"""Metadata repositories: where groups, topics, subscriptions and operational records live."""
