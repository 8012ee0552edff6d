"""Fixtures for the daemon, fleet and dashboard tests (helpers live in tests/support/daemon.py)."""

from __future__ import annotations

import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import DaemonProcess, make_env


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="td"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def daemon_env(short_tmp: Path) -> Iterator[DaemonProcess]:
    """A configured but not started daemon; stopped at teardown if started."""
    env = make_env(short_tmp)
    handle = DaemonProcess(short_tmp, Path(env["TETHER_SOCKET"]), env)
    try:
        yield handle
    finally:
        handle.stop(signal.SIGKILL)


@pytest.fixture
def daemon(daemon_env: DaemonProcess) -> DaemonProcess:
    return daemon_env.start("--deliver-timeout", "2")
