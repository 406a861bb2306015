"""A pickle reader that admits only plain data: dicts, lists, tuples, strings, numbers, booleans, None.

FedScale ships its device and availability traces as pickles (``client_device_capacity``,
``client_behave_trace``; docs/system.md, "Converting FedScale's traces"). Loading a pickle with
:func:`pickle.load` runs whatever callable it names (an object's ``__reduce__``), so a pickle from
the web is a program. :func:`load_plain_pickle` uses an unpickler whose ``find_class`` refuses every
global: no class, function or module can be named, so no constructor and no ``__reduce__`` callable
can run, and the only values that can come out are the ones the pickle opcodes build themselves
(containers, strings, numbers). A pickle that names anything is refused with one line, before any
of it is used.

Two more bounds keep a pickle of a few bytes from costing minutes or gigabytes:

- The unpickler is the pure-Python one (``pickle._Unpickler``), whose memo is a dict: the C
  unpickler grows its memo table to the largest index a ``PUT`` opcode names (a 9-byte pickle with
  ``LONG_BINPUT 2**27`` would cost gigabytes). Here each ``PUT`` stores one entry.
- The value is walked once, remembering every container met: memo references can make a list
  hold itself (a cycle) or make a tree of 60 levels share one list per level (2^60 paths). A
  container met a second time is refused; FedScale's files share none.
"""
from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

from fedhet.errors import FedhetError

PLAIN_TYPES = (dict, list, tuple, str, int, float, bool, type(None))


class UnsafePickleError(FedhetError, ValueError):
    """The pickle holds something other than dicts, lists, strings and numbers."""


class _PlainUnpickler(pickle._Unpickler):    # the pure-Python unpickler: its memo is a dict (above)
    def __init__(self, stream: io.BufferedIOBase, source: str):
        super().__init__(stream)
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        # Every object other than plain data is reached through here (GLOBAL / STACK_GLOBAL opcodes).
        raise UnsafePickleError(f"{self.source}: refused: the pickle names {module}.{name}; only dicts, lists, "
                                "strings and numbers are read (nothing in it was executed)")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError(f"{self.source}: refused: the pickle holds a persistent reference; only dicts, "
                                "lists, strings and numbers are read")


def _check_plain(value: Any, source: str) -> None:
    stack = [value]
    seen: set[int] = set()      # ids of the non-empty containers walked (all alive: value holds them)
    while stack:
        item = stack.pop()
        if not isinstance(item, PLAIN_TYPES):
            raise UnsafePickleError(f"{source}: refused: the pickle holds a {type(item).__name__}; only dicts, "
                                    "lists, strings and numbers are read")
        if isinstance(item, (dict, list, tuple)) and item:
            # Empty containers cannot nest anything (and the empty tuple is one shared object).
            if id(item) in seen:
                raise UnsafePickleError(f"{source}: refused: a {type(item).__name__} is reached twice (it contains "
                                        "itself, or is shared); only a tree of plain data is read")
            seen.add(id(item))
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def loads_plain_pickle(data: bytes, source: str = "pickle") -> Any:
    """The plain data of pickle bytes ``data``; :class:`UnsafePickleError` for anything else."""
    try:
        value = _PlainUnpickler(io.BytesIO(data), source).load()
    except UnsafePickleError:
        raise
    except Exception as error:   # a truncated or non-pickle file: pickle raises many types
        raise UnsafePickleError(f"{source}: not a readable pickle ({type(error).__name__}: {error})") from None
    # bytes and bytearray come from their own opcodes without find_class: refuse them here.
    _check_plain(value, source)
    return value


def load_plain_pickle(path: str | Path) -> Any:
    """:func:`loads_plain_pickle` of the file ``path``."""
    path = Path(path)
    if not path.is_file():
        raise UnsafePickleError(f"{path}: no such file")
    return loads_plain_pickle(path.read_bytes(), str(path))
