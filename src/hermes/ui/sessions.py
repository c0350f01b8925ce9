"""Signed-in users of the console: a random session id in an HttpOnly, SameSite=Strict cookie, and the user's
``Authorization`` header kept in this process's memory only (never sent back to the browser, never logged)."""

from __future__ import annotations

import base64
import secrets
import time
from dataclasses import dataclass

COOKIE = "hermes_console"
IDLE_TIMEOUT = 8 * 3600.0  # seconds a session lasts without a request


@dataclass
class Session:
    user: str
    authorization: str
    last_used: float


def basic_authorization(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Sessions:
    def __init__(self, idle_timeout: float = IDLE_TIMEOUT) -> None:
        self._idle_timeout = idle_timeout
        self._sessions: dict[str, Session] = {}

    def open(self, user: str, authorization: str) -> str:
        self._expire()
        session_id = secrets.token_urlsafe(32)
        self._sessions[session_id] = Session(user, authorization, time.monotonic())
        return session_id

    def get(self, session_id: str | None) -> Session | None:
        session = self._sessions.get(session_id or "")
        if session is None or time.monotonic() - session.last_used > self._idle_timeout:
            return None
        session.last_used = time.monotonic()
        return session

    def close(self, session_id: str | None) -> None:
        self._sessions.pop(session_id or "", None)

    def _expire(self) -> None:
        now = time.monotonic()
        for session_id in [k for k, s in self._sessions.items() if now - s.last_used > self._idle_timeout]:
            del self._sessions[session_id]
