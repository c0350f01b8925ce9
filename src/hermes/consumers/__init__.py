"""The consumers: push delivery of every active subscription."""
