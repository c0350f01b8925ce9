"""The frontend: the publishing API."""
