"""The web console at ``/ui`` on the management port: server-rendered pages (Jinja2, htmx) over the public
management and publishing APIs, called over HTTP with the signed-in user's credentials (docs/console.md)."""

PREFIX = "/ui"
