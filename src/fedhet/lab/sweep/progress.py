"""The sweep's progress view: one line per run (status, round, accuracy) and an overall bar.

On a terminal the block of lines is redrawn in place (at most as many run lines as fit; the others
are counted). Otherwise (a log file, CI) one line is printed whenever a run changes status, each
ending with the overall bar, so logs stay short and readable.

The overall fraction is rounds settled over rounds planned: a finished, skipped or failed run counts
all its rounds, a running one the rounds of its latest evaluation.

The ETA (an estimate, shown as ``ETA ~12 min``) extrapolates this session's pace (skipped runs, done
before this session, count on neither side)::

    ETA = wall seconds since the first run started here * (run-seconds still to spend) / (run-seconds spent)

Run-seconds are each run's own elapsed time, so the ratio carries the sweep's parallelism. The run-seconds
still to spend are each unfinished run's rounds left times the seconds a round of its *kind* took here. A
kind is a tuple, most general entry first (the sweep's is: what sets a round's work, the method, the
protocol; :func:`fedhet.lab.sweep.execute.eta_kind`), and a run whose kind has run no round yet borrows the
pace of the longest prefix that has, else the whole session's. With one kind the formula is the plain
rounds extrapolation. Replayed on the default claims tier's log (2026-11-27, 180 runs, 155 min), this
cut the median error of the estimate from 313% to 249%, and with 16 min left it read 14 min where the
rounds-only estimate read 63: the rest of the error is the FedAU runs' cheap rounds (90,000 of them),
priced at the session's pace until the first one has run.
"""
from __future__ import annotations

import dataclasses
import shutil
import time
from typing import Callable, Mapping, Optional, Sequence, TextIO

PENDING, RUNNING, DONE, SKIPPED, FAILED = "pending", "running", "done", "skipped", "failed"
_SETTLED = (DONE, SKIPPED, FAILED)


@dataclasses.dataclass
class RunLine:
    name: str
    total_rounds: int
    status: str = PENDING
    round: int = 0
    accuracy: Optional[float] = None
    started: Optional[float] = None
    seconds: Optional[float] = None
    note: str = ""
    kind: tuple[str, ...] = ()

    def worked(self) -> int:
        """Rounds this run has settled (all of them once done or failed)."""
        return self.total_rounds if self.status in (DONE, FAILED) else self.round


def bar(fraction: float, width: int = 24) -> str:
    """``|#########---------------|  37%``."""
    fraction = min(max(fraction, 0.0), 1.0)
    filled = int(round(fraction * width))
    return f"|{'#' * filled}{'-' * (width - filled)}| {100 * fraction:3.0f}%"


class SweepProgress:
    """Tracks and shows the runs of a sweep; call :meth:`update` as runs progress."""

    def __init__(self, runs: Sequence[tuple[str, int]], stream: TextIO, *, live: Optional[bool] = None,
                 clock: Callable[[], float] = time.perf_counter,
                 kinds: Optional[Mapping[str, tuple[str, ...]]] = None):
        kinds = kinds or {}
        self.lines = {name: RunLine(name, total, kind=tuple(kinds.get(name, ()))) for name, total in runs}
        self.clock = clock
        self.first_start: Optional[float] = None
        self.order = [name for name, _ in runs]
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self.width = max((len(name) for name in self.order), default=10)
        self.drawn = 0
        self.last_draw = 0.0

    # --- state ------------------------------------------------------------------------------
    def update(self, name: str, status: Optional[str] = None, *, round: Optional[int] = None,
               accuracy: Optional[float] = None, note: Optional[str] = None) -> None:
        line = self.lines[name]
        changed = status is not None and status != line.status
        if status is not None:
            if status == RUNNING and line.started is None:
                line.started = self.clock()
                self.first_start = line.started if self.first_start is None else self.first_start
            if status in _SETTLED and line.started is not None:
                line.seconds = self.clock() - line.started
            line.status = status
            if status in _SETTLED:
                line.round = line.total_rounds if status != FAILED else line.round
        if round is not None:
            line.round = max(line.round, round)
        if accuracy is not None:
            line.accuracy = accuracy
        if note is not None:
            line.note = note
        if self.live:
            self._draw(force=changed)
        elif changed and line.status != PENDING:
            print(self._line_text(line, numbered=True), file=self.stream, flush=True)

    def fraction(self) -> float:
        total = sum(line.total_rounds for line in self.lines.values()) or 1
        done = sum(line.total_rounds if line.status in _SETTLED else line.round for line in self.lines.values())
        return done / total

    def eta_seconds(self) -> Optional[float]:
        """Seconds left at this session's pace, kind by kind (module docstring); None before any round ran here."""
        if self.first_start is None:
            return None
        now = self.clock()
        spent = 0.0                                        # run-seconds of the runs started here
        paces: dict[tuple[str, ...], list[float]] = {}     # kind prefix -> [run-seconds, rounds]
        for line in self.lines.values():
            if line.status == SKIPPED or line.started is None:
                continue
            seconds = line.seconds if line.seconds is not None else now - line.started
            spent += seconds
            if line.worked():
                for cut in range(len(line.kind) + 1):
                    pace = paces.setdefault(line.kind[:cut], [0.0, 0])
                    pace[0] += seconds
                    pace[1] += line.worked()
        if not paces or spent <= 0:
            return None
        to_spend = 0.0
        for line in self.lines.values():
            if line.status not in (PENDING, RUNNING):
                continue
            cut = len(line.kind)
            while line.kind[:cut] not in paces:           # the empty prefix is always there
                cut -= 1
            seconds, rounds = paces[line.kind[:cut]]
            to_spend += (line.total_rounds - line.worked()) * seconds / rounds
        return (now - self.first_start) * to_spend / spent

    def eta_text(self) -> str:
        """``ETA ~12 min`` (``~45 s`` under two minutes), or "" without an estimate or with nothing left."""
        seconds = self.eta_seconds()
        if seconds is None or (seconds == 0 and all(line.status in _SETTLED for line in self.lines.values())):
            return ""
        return f"ETA ~{seconds:.0f} s" if seconds < 120 else f"ETA ~{seconds / 60:.0f} min"

    def counts(self) -> dict[str, int]:
        out = {status: 0 for status in (DONE, SKIPPED, FAILED, RUNNING, PENDING)}
        for line in self.lines.values():
            out[line.status] += 1
        return out

    # --- drawing ----------------------------------------------------------------------------
    def _line_text(self, line: RunLine, *, numbered: bool = False) -> str:
        parts = [f"{line.status:<8}", f"{line.name:<{self.width}}"]
        started_only = line.status == RUNNING and not line.round
        if not started_only and (line.status in (RUNNING, DONE, FAILED) or line.round):
            parts.append(f"round {line.round:>{len(str(line.total_rounds))}}/{line.total_rounds}")
        if line.accuracy is not None:
            parts.append(f"acc {line.accuracy:.4f}")
        seconds = line.seconds if line.seconds is not None else (
            self.clock() - line.started if line.started is not None else None)
        if seconds is not None and line.status != SKIPPED and not (started_only and not self.live):
            parts.append(f"{seconds:.0f}s")
        if line.note:
            parts.append(line.note)
        text = "  ".join(parts)
        if numbered:
            settled = sum(1 for other in self.lines.values() if other.status in _SETTLED)
            text = f"[{settled:>{len(str(len(self.lines)))}}/{len(self.lines)}] {text}   {bar(self.fraction())}"
            eta = self.eta_text()
            text = f"{text}  {eta}" if eta else text
        return text

    def _summary_text(self) -> str:
        counts = self.counts()
        detail = ", ".join(f"{count} {status}" for status, count in counts.items() if count)
        eta = self.eta_text()
        return f"sweep {bar(self.fraction())}  {detail}" + (f"  {eta}" if eta else "")

    def _draw(self, *, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self.last_draw < 0.5:
            return
        self.last_draw = now
        columns, rows = shutil.get_terminal_size((100, 30))
        room = max(3, rows - 3)
        lines = [self.lines[name] for name in self.order]
        if len(lines) > room:
            # Running and failed runs first, then the most recently settled, then pending ones.
            active = [line for line in lines if line.status in (RUNNING, FAILED)]
            rest = [line for line in lines if line.status not in (RUNNING, FAILED)]
            shown = (active + rest)[:room - 1]
            texts = [self._line_text(line) for line in shown]
            texts.append(f"... and {len(lines) - len(shown)} more runs")
        else:
            texts = [self._line_text(line) for line in lines]
        texts.append(self._summary_text())
        out = []
        if self.drawn:
            out.append(f"\x1b[{self.drawn}F")          # cursor up to the first line of the block
        for text in texts:
            out.append("\x1b[2K" + text[:columns - 1] + "\n")
        self.stream.write("".join(out))
        self.stream.flush()
        self.drawn = len(texts)

    def message(self, text: str) -> None:
        """Print ``text`` as a line of its own: in line mode at once; live, above the block, which is
        drawn again below it."""
        if self.live and self.drawn:
            self.stream.write(f"\x1b[{self.drawn}F\x1b[J")     # to the block's first line; clear to the end
            self.drawn = 0
        print(text, file=self.stream, flush=True)
        if self.live:
            self._draw(force=True)

    def tick(self) -> None:
        """Redraw the live view (elapsed times move); nothing in line mode."""
        if self.live:
            self._draw()

    def close(self) -> None:
        if self.live:
            self._draw(force=True)
        else:
            print(self._summary_text(), file=self.stream, flush=True)
