"""Helpers for the dashboard tests (no tests here): a real ``tether dashboard`` process beside
a real daemon, and where screenshots go."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.agentd import AgentDaemon


@dataclass
class DashboardProcess:
    proc: subprocess.Popen[str]
    url: str

    @property
    def port(self) -> int:
        port = urlsplit(self.url).port
        assert port is not None
        return port

    @property
    def token(self) -> str:
        return parse_qs(urlsplit(self.url).query)["token"][0]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def start_dashboard(agentd: AgentDaemon, *extra: str) -> Iterator[DashboardProcess]:
    """A real ``tether dashboard --port 0 EXTRA...`` beside ``agentd``, ended afterwards."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "dashboard", "--port", "0", *extra],
        env=agentd.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the dashboard prints its URL first
        assert line.startswith("tether dashboard: http://127.0.0.1:"), line
        yield DashboardProcess(proc, line.split(": ", 1)[1].strip())
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture
def dashboard(agentd: AgentDaemon) -> Iterator[DashboardProcess]:
    with start_dashboard(agentd) as dash:
        yield dash


def artifact_dir(fallback: Path) -> Path:
    """Where screenshots go: ``$TETHER_ARTIFACTS`` (CI sets it), else ``fallback`` (a tmp
    dir): a test run never writes into the clone's tracked files."""
    path = Path(os.environ.get("TETHER_ARTIFACTS") or fallback)
    path.mkdir(parents=True, exist_ok=True)
    return path
