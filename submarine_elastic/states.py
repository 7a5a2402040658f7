"""One rule for every state machine of the project.

A :class:`Transitions` table lists, for each state of an enum, the states it may move to. Staying in a state is
a transition like any other: allowed only where the table lists the state among its own successors. Every member
of the enum must have a row, so that a new state cannot be added without saying where it goes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Generic, TypeVar

S = TypeVar("S", bound=Enum)


class IllegalTransitionError(ValueError):
    """A state change that its machine does not allow: a bug, or a peer breaking the protocol.

    Attributes:
        what: whose state it is (``job mnist``, ``worker-2``).
        current, requested: the state it is in and the one asked for.
    """

    def __init__(self, what: str, current: Enum, requested: Enum, allowed: Iterable[Enum]) -> None:
        names = ", ".join(sorted(str(s.value) for s in allowed))
        then = f"from {current.value} only to {names}" if names else f"{current.value} is final"
        super().__init__(f"{what}: no transition from {current.value} to {requested.value} ({then})")
        self.what = what
        self.current = current
        self.requested = requested


class Transitions(Generic[S]):
    """The transitions of one enum's machine.

    Raises:
        ValueError: a member of the enum has no row, or a row names a state of another enum.
    """

    def __init__(self, kind: type[S], table: Mapping[S, Iterable[S]]) -> None:
        rows = {state: frozenset(nexts) for state, nexts in table.items()}
        missing = [m.name for m in kind if m not in rows]
        if missing:
            raise ValueError(f"{kind.__name__}: no transitions given for {', '.join(missing)}")
        stray = [repr(s) for nexts in [set(rows), *rows.values()] for s in nexts if not isinstance(s, kind)]
        if stray:
            raise ValueError(f"{kind.__name__}: the table names states of another kind: {', '.join(stray)}")
        self.kind = kind
        self._next = rows

    def allowed(self, current: S) -> frozenset[S]:
        """The states ``current`` may move to."""
        return self._next[current]

    def can(self, current: S, requested: S) -> bool:
        """Whether ``current -> requested`` is one of the machine's transitions."""
        return requested in self._next[current]

    def advance(self, what: str, current: S, requested: S) -> S:
        """``requested``, when ``current -> requested`` is allowed.

        Raises:
            IllegalTransitionError: it is not (naming ``what``, both states and the allowed ones).
        """
        if not self.can(current, requested):
            raise IllegalTransitionError(what, current, requested, self._next[current])
        return requested

    def final(self, state: S) -> bool:
        """Whether nothing follows ``state`` (other than itself)."""
        return not (self._next[state] - {state})
