"""The idempotency keys' table in C (key_table.c)."""

from collections.abc import Callable, Sequence
from typing import Any

MAX_KEY_LENGTH: int
RECORD_MAGIC: bytes

class KeyTable:
    capacity: int
    def __init__(
        self,
        result: type,
        rejected: Callable[[Any, str, bool], BaseException],
        wait: Callable[[int, Any], None],
        release: Callable[[int, Any], None],
        spooled: Callable[..., None],
        kept: Callable[[], None],
    ) -> None: ...
    def publish(
        self,
        produce: Callable[..., None],
        topic: Any,
        message_id: str,
        body: Any,
        headers: Any,
        key: str,
        answer: Callable[[Any], None],
        digest: int = ...,
    ) -> None: ...
    def flush(self) -> list[bytes]: ...
    def learn(self, record: bytes) -> int: ...
    @staticmethod
    def record(keys: Sequence[tuple[int, int, str, bool, int]]) -> bytes: ...
    def find(self, named: int) -> tuple[int, str | None, bool, int] | None: ...
    def sweep(self, slots: int) -> None: ...
    def __len__(self) -> int: ...
