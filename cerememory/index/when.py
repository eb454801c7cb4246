"""The time a question speaks of: "on 8 May, 2023", "in August 2023", "in 2022", "last week".

Recall uses it as a soft signal: memories whose event time (`created_at`) falls in the span rank
higher; nothing is filtered out (a hard window is what `cue.temporal` is for). Dates without a
year borrow the question's other year, if it names one; relative words ("last week") count from
`now`, and only when no date is named.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime, timedelta

MONTHS = {name.lower(): n for n, name in enumerate(calendar.month_name) if name}
MONTHS |= {name.lower(): n for n, name in enumerate(calendar.month_abbr) if name}
_MONTH = "(" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d\d)"
_DAY_MONTH = re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s*{_YEAR}?\b", re.I)
_MONTH_DAY = re.compile(rf"\b{_MONTH}\s+{_DAY}\b(?:,?\s*{_YEAR}\b)?", re.I)
_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.I)
_YEAR_ALONE = re.compile(rf"\b{_YEAR}\b")
_RELATIVE = {"today": (0, 1), "yesterday": (1, 1), "last week": (7, 7), "this week": (7, 7),
             "last month": (31, 31), "this month": (31, 31), "last year": (366, 366)}
_RELATIVE_WORDS = [(re.compile(rf"\b{phrase}\b"), back, length) for phrase, (back, length) in _RELATIVE.items()]
DAY_SLACK = timedelta(days=1)  # a day named loosely ("on the 8th", time zones)

Span = tuple[datetime, datetime]


def _day(year: int, month: int, day: int) -> Span | None:
    try:
        start = datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None
    return start - DAY_SLACK, start + timedelta(days=1) + DAY_SLACK


def _month(year: int, month: int) -> Span:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return start, end


def time_span(text: str, now: datetime) -> Span | None:
    """The span of time `text` names, or None; several dates make one span covering them all."""
    spans: list[Span] = []
    used: list[tuple[int, int]] = []
    years = [int(y) for y in _YEAR_ALONE.findall(text)]
    default_year = years[-1] if years else None

    def free(match: re.Match[str]) -> bool:
        return not any(a < match.end() and match.start() < b for a, b in used)

    for pattern, order in ((_DAY_MONTH, "dmy"), (_MONTH_DAY, "mdy")):
        for match in pattern.finditer(text):
            if not free(match):
                continue
            day, month, year = (match.group(1), match.group(2), match.group(3)) if order == "dmy" \
                else (match.group(2), match.group(1), match.group(3))
            year_n = int(year) if year else default_year
            if year_n is None:
                continue
            span = _day(year_n, MONTHS[month.lower()], int(day))
            if span is not None:
                spans.append(span)
                used.append(match.span())
    for match in _MONTH_YEAR.finditer(text):
        if free(match):
            spans.append(_month(int(match.group(2)), MONTHS[match.group(1).lower()]))
            used.append(match.span())
    for match in _YEAR_ALONE.finditer(text):
        if free(match):
            year = int(match.group(1))
            spans.append((datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)))
    lowered = text.lower()
    for words, back, length in _RELATIVE_WORDS:
        if not spans and words.search(lowered):  # a date named wins over "last week"
            start = (now - timedelta(days=back)).replace(hour=0, minute=0, second=0, microsecond=0)
            spans.append((start - DAY_SLACK, start + timedelta(days=length) + DAY_SLACK))
    if not spans:
        return None
    return min(s for s, _ in spans), max(e for _, e in spans)
