"""Which agents may run: at most ``limit`` at once, the rest waiting in spawn order.

Sans-IO: names in, names out; the supervisor starts what :meth:`Admission.request` admits
and what :meth:`Admission.release` hands back, and keeps the queued agents' rows. ``limit``
None admits everything at once (a daemon started without ``--max-running``).
"""

from __future__ import annotations

from collections import deque

__all__ = ["Admission"]


class Admission:
    """The running set and the queue; see the module docstring."""

    def __init__(self, limit: int | None = None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"the running limit must be at least 1, not {limit}")
        self.limit = limit
        self.running: set[str] = set()
        self._queue: deque[str] = deque()

    def request(self, name: str) -> bool:
        """``name`` wants to run: True when it may start now, else it joins the queue."""
        if name in self.running:
            return True
        if name not in self._queue and not self._queue and self._room():
            self.running.add(name)
            return True
        if name not in self._queue:
            self._queue.append(name)
        return False

    def adopt(self, name: str) -> None:
        """``name`` runs already (re-adopted after a restart): it counts, whatever the limit."""
        self.running.add(name)

    def release(self, name: str) -> list[str]:
        """``name`` stopped running or left the queue: the names that may start now, in
        the order they were queued."""
        self.running.discard(name)
        if name in self._queue:
            self._queue.remove(name)
        admitted = []
        while self._queue and self._room():
            admitted.append(self._queue.popleft())
            self.running.add(admitted[-1])
        return admitted

    def position(self, name: str) -> int | None:
        """Its place in the queue, 1 first; None when it is not queued."""
        try:
            return self._queue.index(name) + 1
        except ValueError:
            return None

    @property
    def queued(self) -> list[str]:
        return list(self._queue)

    def _room(self) -> bool:
        return self.limit is None or len(self.running) < self.limit
