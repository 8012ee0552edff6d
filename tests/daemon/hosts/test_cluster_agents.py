"""What a daemon learns of the other hosts' agents from the cluster's registry
(tether.daemon.hosts.agents.ClusterAgents), fed rows directly: another host's row is
input like any other, checked before it is kept, and it is kept under the key's host."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.daemon.fleet.replies import AgentStatus
from tether.daemon.hosts import agents as cluster_agents
from tether.daemon.hosts.agents import ClusterAgents


def _row(name: str, **fields: object) -> bytes:
    status = AgentStatus(
        name=name, state="ready", run_id="r1", run_dir="/tmp/r1", created_at=1.0, status="live",
        live_status="live", short_id="r1", harness="tether", session_id="r1",
        log_path="/tmp/r1/events.jsonl",
    )  # fmt: skip
    return msgspec.json.encode({**msgspec.to_builtins(status), **fields})


def test_a_row_is_kept_under_the_host_its_key_names() -> None:
    agents = ClusterAgents("A")
    agents.apply("B.w1", _row("w1", host="Z"))  # the row's own claim is not trusted
    assert agents.host_of("w1") == "B"
    assert [(row.name, row.host) for row in agents.rows()] == [("w1", "B")]
    agents.apply("B.w1", None)  # deleted
    assert agents.host_of("w1") is None
    assert agents.rows() == []


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("A.w1", _row("w1")),  # this daemon's own agents: its fleet has them
        ("hosts.B", b'{"host":"B","agents":1}'),  # a heartbeat
        ("B.w1", _row("w2")),  # a row under another name's key
        ("B.w1", b"not json"),
        ("B.w1", b"[" * 100_000),
        ("B.w1", b'{"name":"w1"}'),  # no status
        ("B x.w1", _row("w1")),  # no host name
        ("B", _row("w1")),
    ],
)
def test_what_is_not_another_hosts_row_is_not_kept(key: str, value: bytes) -> None:
    agents = ClusterAgents("A")
    agents.apply("B.w1", _row("w1"))
    agents.apply(key, value)
    assert [(row.name, row.host) for row in agents.rows()] == (
        [] if key == "B.w1" else [("w1", "B")]  # a bad row replaces the key's good one
    )


def test_the_rows_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_agents, "MAX_ROWS", 2)
    agents = ClusterAgents("A")
    for name in ("w1", "w2", "w3"):
        agents.apply(f"B.{name}", _row(name))
    assert sorted(row.name for row in agents.rows()) == ["w1", "w2"]
    agents.apply("B.w1", _row("w1", state="running"))  # a known row still changes
    agents.apply("B.w2", None)
    agents.apply("C.w3", _row("w3"))  # room again
    assert sorted((row.name, row.state) for row in agents.rows()) == [
        ("w1", "running"),
        ("w3", "ready"),
    ]


@given(st.text(max_size=80), st.one_of(st.none(), st.binary(max_size=300)))
def test_any_change_is_taken_without_an_error(key: str, value: bytes | None) -> None:
    agents = ClusterAgents("A")
    agents.apply(key, value)
    for row in agents.rows():
        assert agents.host_of(row.name) == row.host
