"""Cron expressions for the seed timer: classic five-field cron, or Quartz's six or seven fields (seed 002).

==========  ===================================================================
fields      meaning
==========  ===================================================================
5           minute hour day-of-month month day-of-week (cron: Sunday is 0 or 7)
6 or 7      second minute hour day-of-month month day-of-week [year] (Quartz)
==========  ===================================================================

Quartz expressions such as seed 002's ``0 10 1 * * ?`` (01:10:00 every day)
are translated for croniter (``second_at_beginning``): ``?`` ("no specific
value", allowed in one of the two day fields) stands for ``*``, and Quartz's
day-of-week numbers 1-7 (Sunday = 1) become cron's 0-6, also in ``6#3`` (the
third Friday) and ``6L`` (the last Friday).  Names (``MON-FRI``) are the same
in both.  Times are the host's local time zone (as cron and Quartz use) unless
another one is given.  No Twisted here: the configuration validates with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, tzinfo

_REFERENCE = 1_577_836_800.0  # 2020-01-01: "never fires" is checked from here (a year field long past fails)
_DOW_NUMBER = re.compile(r"(?<![#/\d])(\d+)")
_QUARTZ_LAST = re.compile(r"^(\d)L$", re.IGNORECASE)


class CronError(ValueError):
    """A cron expression croniter cannot read, or a Quartz rule it breaks."""


@dataclass(frozen=True)
class Cron:
    """A validated expression; ``next_after(t)`` is the first firing strictly after epoch time ``t``."""

    expression: str
    translated: str
    seconds_first: bool
    tz: tzinfo | None = None  # None: the local zone (dateutil's tzlocal, which follows TZ and DST)

    def next_after(self, when: float) -> float:
        """Raises CronError when the expression fires no more (a year field that has passed)."""
        from croniter import croniter

        start = datetime.fromtimestamp(when, self._zone())
        try:
            return float(croniter(self.translated, start, second_at_beginning=self.seconds_first).get_next(float))
        except Exception as e:  # CroniterBadDateError: no date within croniter's search window
            raise CronError(f"{self.expression!r} never fires after {when:.0f} ({e})") from None

    def _zone(self) -> tzinfo:
        if self.tz is not None:
            return self.tz
        from dateutil.tz import tzlocal

        zone: tzinfo = tzlocal()
        return zone


def parse(expression: str, tz: tzinfo | None = None) -> Cron:
    """Validate ``expression`` (5 fields: cron; 6 or 7: Quartz); raises CronError saying why."""
    from croniter import croniter

    fields = expression.split()
    if len(fields) not in (5, 6, 7):
        raise CronError(f"expected 5 (cron) or 6-7 (Quartz: seconds first) fields, got {len(fields)} in {expression!r}")
    seconds_first = len(fields) > 5
    if seconds_first:
        fields = _from_quartz(fields, expression)
    translated = " ".join(fields)
    if not croniter.is_valid(translated, second_at_beginning=seconds_first):
        raise CronError(f"not a valid cron expression: {expression!r}")
    cron = Cron(expression, translated, seconds_first, tz)
    cron.next_after(_REFERENCE)  # a 30th of February never fires
    return cron


def _from_quartz(fields: list[str], expression: str) -> list[str]:
    """Quartz's fields in croniter's terms (seconds first stays first: croniter moves it)."""
    day, dow = fields[3], fields[5]
    if day == "?" and dow == "?":
        raise CronError(f"'?' may stand in one of day-of-month and day-of-week, not both: {expression!r}")
    fields = list(fields)
    fields[5] = ",".join(_quartz_dow(part, expression) for part in dow.split(","))
    return fields


def _quartz_dow(part: str, expression: str) -> str:
    """One day-of-week list item, Quartz numbering (1 = Sunday) to cron's (0 = Sunday)."""
    last = _QUARTZ_LAST.match(part)
    if last:
        return f"L{_shift(last.group(1), expression)}"
    return _DOW_NUMBER.sub(lambda m: _shift(m.group(1), expression), part)


def _shift(number: str, expression: str) -> str:
    value = int(number)
    if not 1 <= value <= 7:
        raise CronError(f"Quartz day-of-week numbers are 1 (Sunday) to 7, got {value} in {expression!r}")
    return str(value - 1)
