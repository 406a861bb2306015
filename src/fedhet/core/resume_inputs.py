"""Input files whose contents a checkpoint already holds, and are therefore not read on resume.

An availability trace (``participation.trace_file``) and a profile file (``system.profile_file``)
are read when a run starts; the ``trace`` process's state holds the trace, and the clock's state holds
the profiles (docs/system.md, "Resume and determinism"). A resumed run takes both from its
checkpoint, so it goes on with the files it started with even when they were edited, cut or removed
since. While :func:`resuming` is active:

- :func:`from_checkpoint` is true: configuration checks that would read such a file skip it (the
  checkpoint, loaded afterwards, provides what the file did);
- :func:`saved_state` finds a component's state in the checkpoint's simulator state, so the
  component starts from what the run started with instead of reading its file again.

A context variable: it holds for the code the resuming call runs, and not for other threads.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterable, Iterator, Mapping, Optional

_SAVED: contextvars.ContextVar[Optional[Mapping[str, Any]]] = contextvars.ContextVar(
    "fedhet_resume_inputs", default=None)


@contextlib.contextmanager
def resuming(saved_simulator: Optional[Mapping[str, Any]] = None) -> Iterator[None]:
    """While in the block, the run being built is resumed from a checkpoint whose simulator state is
    ``saved_simulator`` (None or empty: the checkpoint is not loaded yet, only the configuration is)."""
    token = _SAVED.set(saved_simulator if saved_simulator is not None else {})
    try:
        yield
    finally:
        _SAVED.reset(token)


def from_checkpoint() -> bool:
    """Whether the run being configured or built resumes from a checkpoint (module docstring)."""
    return _SAVED.get() is not None


def _find(value: Any, fields: frozenset[str]) -> Optional[Mapping[str, Any]]:
    if isinstance(value, Mapping):
        if set(value) == fields:
            return value
        children: Iterable[Any] = value.values()
    elif isinstance(value, (list, tuple)):
        children = value
    else:
        return None
    for child in children:
        found = _find(child, fields)
        if found is not None:
            return found
    return None


def saved_state(part: str, fields: Iterable[str]) -> Optional[Mapping[str, Any]]:
    """The saved typed state with exactly ``fields`` under the checkpoint's ``part`` (``participation``,
    ``clock``; a wrapping process's state is searched too), as the checkpoint holds it (a dict of its
    fields); None when not resuming or not found."""
    saved = _SAVED.get()
    if not saved or part not in saved:
        return None
    return _find(saved[part], frozenset(fields))
