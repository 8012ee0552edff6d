"""The inbox: a reverse channel any agent writes with ``echo``, drained into SQLite.

- :mod:`~tether.inbox.messages`: typed messages and the total ``parse_line``.
- :mod:`~tether.inbox.store`: the ``inbox_*`` tables (WAL) and ``StoredMessage``.
- :mod:`~tether.inbox.drain`: ``drain_file``: drain one file once.
- :mod:`~tether.inbox.live`: ``InboxDrain``: tail many inboxes live (asyncio).
- :mod:`~tether.inbox.writer`: ``create_inbox``, ``append_inbox``, ``inbox_env``.

Names are loaded lazily so that importing a submodule stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.inbox.drain import DrainResult, drain_file
    from tether.inbox.live import InboxDrain, InboxDrainStatistics
    from tether.inbox.messages import (
        ApprovalRequest,
        Clarification,
        Done,
        InboxMessage,
        InboxRejection,
        OtherMessage,
        Progress,
        ResultPartial,
        parse_line,
    )
    from tether.inbox.store import InboxStore, StoredMessage, open_store
    from tether.inbox.writer import (
        INBOX_FILENAME,
        append_inbox,
        create_inbox,
        inbox_env,
        inbox_path_from_env,
    )

_EXPORTS = {
    "DrainResult": "drain",
    "InboxDrain": "live",
    "InboxDrainStatistics": "live",
    "drain_file": "drain",
    "ApprovalRequest": "messages",
    "Clarification": "messages",
    "Done": "messages",
    "InboxMessage": "messages",
    "InboxRejection": "messages",
    "OtherMessage": "messages",
    "Progress": "messages",
    "ResultPartial": "messages",
    "parse_line": "messages",
    "InboxStore": "store",
    "StoredMessage": "store",
    "open_store": "store",
    "INBOX_FILENAME": "writer",
    "append_inbox": "writer",
    "create_inbox": "writer",
    "inbox_env": "writer",
    "inbox_path_from_env": "writer",
}

__all__ = [
    "INBOX_FILENAME",
    "ApprovalRequest",
    "Clarification",
    "Done",
    "DrainResult",
    "InboxDrain",
    "InboxDrainStatistics",
    "InboxMessage",
    "InboxRejection",
    "InboxStore",
    "OtherMessage",
    "Progress",
    "ResultPartial",
    "StoredMessage",
    "append_inbox",
    "create_inbox",
    "drain_file",
    "inbox_env",
    "inbox_path_from_env",
    "open_store",
    "parse_line",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tether.inbox' has no attribute {name!r}")
    return getattr(importlib.import_module(f"tether.inbox.{module}"), name)
