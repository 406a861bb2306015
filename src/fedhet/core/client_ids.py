"""Client ids read from files (availability traces, profile files, FedScale's pickles).

An id is an integer: a JSON or pickle integer (not a boolean, not a float such as 3.9, which would
silently become client 3) or, in a text form (CSV, a pickle's string keys), the text of one. A file's
ids must be exactly 0..N-1: the check sorts the ids the file holds and never builds anything of the
size of the largest id, so one id of 10^12 costs nothing before it is refused.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Optional

_INTEGER_TEXT = re.compile(r"\s*[+-]?\d{1,30}\s*")


def parse_client_id(value: Any) -> Optional[int]:
    """``value`` as a client id: an ``int`` (not a ``bool``) or the decimal text of one; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INTEGER_TEXT.fullmatch(value):
        return int(value)
    return None


def first_missing_id(ids: Iterable[int]) -> Optional[int]:
    """The smallest id in 0..max that ``ids`` (distinct, none negative) lacks; None when they are
    exactly 0..N-1. Costs a sort of the ids given, whatever their largest value."""
    for expected, value in enumerate(sorted(ids)):
        if value != expected:
            return expected
    return None
