"""The wire protocol's limits, each pinned by the spec or the reference (REFERENCE-FACTS §1)."""

from __future__ import annotations

from typing import Final

# `v` must equal this; any other value is a fatal version-mismatch.
VERSION: Final = 1

# A line whose length without its newline is >= this is `too-large`; the largest legal
# line is 65535 bytes. It equals the read budget so a bounded drain can always consume it.
MAX_LINE_BYTES: Final = 65536

# One read hands out at most this many bytes and this many lines (a bounded drain).
READ_BUDGET_BYTES: Final = 65536
READ_BUDGET_LINES: Final = 64

# Largest integer JSON peers agree on: the bound for seq, ref, turn and content-index.
MAX_SAFE_INTEGER: Final = 9007199254740991

# `summary` is the first line of the text, cut to this many bytes.
SUMMARY_BYTES: Final = 160

# normalize shrinks a display event's payload to fit this many bytes in total.
PAYLOAD_BUDGET_BYTES: Final = 12288

# A normalized record whose encoding exceeds this is replaced by an `info` record.
RECORD_BUDGET_BYTES: Final = 16384

# Each string in a payload is cut to this many bytes (on a UTF-8 boundary).
STRING_BUDGET_BYTES: Final = 4096

# A payload keeps at most this many entries (object members and array items, in all).
TABLE_BUDGET_ENTRIES: Final = 64

# Values nested deeper than this become the string DEPTH_LIMIT_TEXT.
MAX_DEPTH: Final = 8
DEPTH_LIMIT_TEXT: Final = "[transport depth limit]"

# A long final text is cut to a UTF-8 prefix of this many bytes, halving until it fits.
RESULT_OVERHEAD_BYTES: Final = 1024
RESULT_TEXT_BYTES: Final = MAX_LINE_BYTES - RESULT_OVERHEAD_BYTES

# The child's poll cadence where no file-change notification is available (seconds).
POLL_BUSY_S: Final = 0.030
POLL_IDLE_S: Final = 0.300
