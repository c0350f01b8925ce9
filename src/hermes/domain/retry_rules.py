"""Our extension of the subscription policy: what a subscriber's failed answer leads to beyond Hermes' table.

Status rules map statuses to actions, the first rule that matches deciding (a status no rule matches follows
Hermes' table); backoff jitter spreads the retries of messages that failed together; and a subscriber may end a
message's retries with the stop-retry header when the subscription allows it. The defaults are Hermes' behaviour.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

MAX_STATUS_RULES = 20
MAX_RULE_DELAY_MS = 3_600_000
# A status ("409"), a range of them ("400-499") or a class ("5xx"), from 100 to 599
STATUS_PATTERN = r"^([1-5][0-9]{2}(-[1-5][0-9]{2})?|[1-5][xX]{2})$"
_STATUS = re.compile(STATUS_PATTERN)

# The subscriber's answer header that ends a message's retries (when the subscription allows it), and its value
STOP_RETRY_HEADER = "Hermes-Retry"
STOP_RETRY_VALUE = "stop"
# The metrics' count of the messages whose retries that header ended
RETRIES_STOPPED = "retriesStopped"


class RuleAction(StrEnum):
    RETRY = "RETRY"  # with the subscription's backoff, slowing the rate down as a 5xx does
    RETRY_AFTER = "RETRY_AFTER"  # after the rule's fixed delay
    DISCARD = "DISCARD"  # given up at once and dropped: not kept as a dead letter
    DEAD_LETTER = "DEAD_LETTER"  # given up at once and kept as a dead letter

    @property
    def counter(self) -> str:
        """The name of the metrics' count of the messages of the answers this action was taken on."""
        return "rule" + self.value.title().replace("_", "")  # ruleRetry, ruleRetryAfter, ruleDiscard...


class BackoffJitter(StrEnum):
    """AWS' jitters of a backoff ``b``: none (Hermes'), FULL (uniform 0..b), EQUAL (b/2 + uniform 0..b/2)."""

    NONE = "NONE"
    FULL = "FULL"
    EQUAL = "EQUAL"


def status_range(status: str) -> tuple[int, int] | None:
    """The first and last status ``status`` stands for (``"5xx"``: 500 to 599); None when it is none of the
    forms (the range's order is not checked)."""
    if not _STATUS.fullmatch(status):  # match's $ would let a trailing newline through
        return None
    if status[1] in "xX":
        hundred = int(status[0]) * 100
        return hundred, hundred + 99
    first, _, last = status.partition("-")
    return int(first), int(last or first)


@dataclass(frozen=True)
class StatusRule:
    status: str  # as the subscription says it: "409", "400-499" or "5xx"
    first: int
    last: int
    action: RuleAction
    delay: int | None = None  # millis before the retry: RETRY_AFTER's, which it requires

    def matches(self, status: int) -> bool:
        return self.first <= status <= self.last


@dataclass(frozen=True)
class RetryRules:
    status_rules: tuple[StatusRule, ...] = ()
    backoff_jitter: BackoffJitter = BackoffJitter.NONE
    stop_retry_header_allowed: bool = False

    def rule_for(self, status: int) -> tuple[int, StatusRule] | None:
        """The first rule that matches ``status``, with its index; None when Hermes' table decides."""
        for index, rule in enumerate(self.status_rules):
            if rule.matches(status):
                return index, rule
        return None


NO_RULES = RetryRules()
