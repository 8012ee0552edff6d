"""`tether run`, `runs`, `show`, `replay` and `demo` as a user runs them: real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.waits import wait_glob, wait_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "demo"
TIMEOUT = 60


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TETHER_HOME"] = str(tmp_path / "home")
    env["NO_COLOR"] = "1"
    env["COLUMNS"] = "80"
    for name in ("TETHER_PROVIDER", "TETHER_MODEL", "FEN_WIRE_RUN_ID", "TETHER_SUBAGENT_DEPTH"):
        env.pop(name, None)
    return env


def tether(tmp_path: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=TIMEOUT,
        check=False,
    )


def _script(tmp_path: Path, replies: list[dict[str, object]]) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(replies))
    return str(path)


def _quick(tmp_path: Path) -> str:
    bash = {"name": "bash", "arguments": {"command": "echo one; echo two"}}
    return _script(
        tmp_path, [{"text": "Looking.", "tool_calls": [bash]}, {"text": "Saw two lines."}]
    )


def _latest(tmp_path: Path) -> dict[str, object]:
    out = tether(tmp_path, "runs", "--json", "--limit", "1")
    assert out.returncode == 0, out.stderr
    record: dict[str, object] = json.loads(out.stdout.splitlines()[0])
    return record


def test_the_final_answer_goes_to_stdout(tmp_path: Path) -> None:
    script = str(EXAMPLES / "steered.json")
    out = tether(tmp_path, "run", "--provider", "scripted", "--script", script, "take notes")
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        "Done. notes/a.txt has 3 lines and notes/b.txt has 1 (4 in all), as the steering asked.\n"
    )
    assert (tmp_path / "notes" / "a.txt").read_text() == "alpha\nbeta\ngamma\n"
    record = _latest(tmp_path)
    assert record["status"] == "done"
    assert record["task"] == "take notes"
    assert record["provider"] == "scripted"


def test_runs_and_show_name_the_agent_cli_that_ran(tmp_path: Path) -> None:
    """A run of an agent CLI shows the agent (it has no provider: the column said '-')."""
    import time

    from tether.store.index import RunIndex, RunRecord

    assert tether(tmp_path, "run", "--provider", "scripted", "hello").returncode == 0
    run_dir = tmp_path / "home" / "runs" / "20261204T000000-abcdef"
    run_dir.mkdir()
    (run_dir / "events.jsonl").write_text("")
    record = RunRecord(
        "20261204T000000-abcdef", "with claude", "done", time.time(), str(run_dir),
        model="sonnet", ended_at=time.time(), options={"agent": "claude"},
    )  # fmt: skip
    RunIndex(tmp_path / "home" / "tether.db").insert(record)
    table = tether(tmp_path, "runs").stdout.splitlines()
    assert table[0].split()[3] == "AGENT"
    assert sorted(line.split()[3] for line in table[1:]) == ["claude/sonnet", "scripted"]
    shown = tether(tmp_path, "show", "20261204T000000-abcdef").stdout
    assert "agent:         claude\n" in shown


def test_scripted_without_a_script_still_shows_the_protocol(tmp_path: Path) -> None:
    out = tether(tmp_path, "run", "--provider", "scripted", "what is here?")
    assert out.returncode == 0, out.stderr
    assert "You asked: what is here?" in out.stdout
    assert "scripted provider" in out.stdout


def test_stdin_lines_steer_and_follow_up(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        [{"text": "Thinking.", "delay_ms": 1500}, {"text": "Steered."}, {"text": "Followed."}],
    )
    out = tether(
        tmp_path,
        "run",
        "--script",
        script,
        "--provider",
        "scripted",
        "task",
        stdin="be brief\n",
    )
    assert out.returncode == 0, out.stderr
    assert "steer accepted" in out.stderr
    events = (Path(str(_latest(tmp_path)["run_dir"])) / "events.jsonl").read_text()
    assert '"type":"steering-injected"' in events


@pytest.mark.parametrize(
    ("replies", "args", "code"),
    [
        ([{"error": "the model is down"}], [], 4),
        (
            [
                {
                    "text": "Waiting.",
                    "tool_calls": [{"name": "bash", "arguments": {"command": "sleep 30"}}],
                }
            ],
            ["--deadline", "1", "--finalize-before", "0"],
            5,
        ),
    ],
)
def test_exit_codes(
    tmp_path: Path, replies: list[dict[str, object]], args: list[str], code: int
) -> None:
    script = _script(tmp_path, replies)
    out = tether(tmp_path, "run", "--provider", "scripted", "--script", script, *args, "task")
    assert out.returncode == code, out.stderr
    # `tether runs` says what the exit code says: a run whose answer is an error failed
    assert _latest(tmp_path)["status"] == {4: "failed", 5: "timed-out"}[code]


def test_a_run_with_no_api_key_is_recorded_failed(tmp_path: Path) -> None:
    env = {k: v for k, v in _env(tmp_path).items() if not k.startswith("ANTHROPIC_")}
    out = subprocess.run(
        [sys.executable, "-m", "tether", "run", "--no-stdin", "--provider", "anthropic", "hi"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=TIMEOUT,
        check=False,
    )
    assert out.returncode == 4, out.stderr
    assert "ANTHROPIC_API_KEY" in out.stderr
    record = _latest(tmp_path)
    assert (record["status"], record["stop_reason"]) == ("failed", "error")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--provider", "nope"], "unknown provider 'nope'"),
        (["--provider", "scripted", "--script", "/nonexistent"], "No such file"),
        (["--provider", "scripted", "--script", "fifo"], "not a regular file"),
        (["--provider", "scripted", "--script", "null.json"], "a JSON list"),
        (["--cwd", "/nonexistent"], "not a directory"),
    ],
    ids=["provider", "missing-script", "fifo-script", "bad-script", "cwd"],
)
def test_bad_input_is_usage_and_records_nothing(tmp_path: Path, args: list[str], says: str) -> None:
    """Validated before the run is prepared: exit 2 with one line, no run directory, no
    row (a FIFO as the script never blocks)."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "null.json").write_text("null")
    out = tether(tmp_path, "run", "--no-stdin", *args, "task")
    assert out.returncode == 2, out.stderr
    assert says in out.stderr.splitlines()[-1]
    assert not (tmp_path / "home" / "runs").exists()


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert tether(tmp_path, "run").returncode == 2
    assert tether(tmp_path, "run", "--deadline", "-1", "task").returncode == 2
    help_text = tether(tmp_path, "run", "--help")
    assert help_text.returncode == 0
    assert "0 done, 3 cancelled (also Ctrl-C, SIGTERM, SIGHUP" in help_text.stdout
    assert "5 timed-out, 2 usage error" in help_text.stdout


def _interrupt(
    tmp_path: Path, times: int, *, finalize_delay_ms: int = 0
) -> subprocess.CompletedProcess[str]:
    """``tether run`` on a turn busy in a tool, interrupted ``times`` times; each Ctrl-C
    after the first is sent once the control the one before it caused is in the file."""
    script = _script(
        tmp_path,
        [
            {
                "text": "Busy.",
                "tool_calls": [{"name": "bash", "arguments": {"command": "sleep 30"}}],
            },
            {"text": "Finalized answer.", "delay_ms": finalize_delay_ms},
        ],
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "run", "--provider", "scripted", "--script", script, "t"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    run_dir = wait_glob(tmp_path / "home" / "runs", "*/events.jsonl", proc=proc).parent
    wait_text(run_dir / "events.jsonl", '"type":"tool-call"', proc=proc)
    for control in ["finalize", "cancel"][:times]:
        proc.send_signal(signal.SIGINT)
        wait_text(run_dir / "control.jsonl", f'"type":"{control}"', proc=proc)
    stdout, stderr = proc.communicate(timeout=TIMEOUT)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_ctrl_c_finalizes(tmp_path: Path) -> None:
    out = _interrupt(tmp_path, 1)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "Finalized answer.\n"


def test_ctrl_c_twice_cancels(tmp_path: Path) -> None:
    # the finalize turn takes a minute, so only the second Ctrl-C can end the run
    out = _interrupt(tmp_path, 2, finalize_delay_ms=60_000)
    assert out.returncode == 3, out.stderr
    assert _latest(tmp_path)["status"] == "cancelled"


def test_output_wire_prints_the_event_lines(tmp_path: Path) -> None:
    script = _quick(tmp_path)
    out = tether(
        tmp_path, "run", "--output", "wire", "--script", script, "--provider", "scripted", "t"
    )
    assert out.returncode == 0, out.stderr
    log = (Path(str(_latest(tmp_path)["run_dir"])) / "events.jsonl").read_text()
    assert out.stdout == log


@pytest.mark.parametrize("output", ["human", "stream-json", "wire"])
def test_replay_equals_live(tmp_path: Path, output: str) -> None:
    # (inbox messages are not in the event log, so this run writes none)
    bash = {"name": "bash", "arguments": {"command": "printf 'a\\nb\\n' > f.txt; wc -l f.txt"}}
    script = _script(
        tmp_path,
        [
            {"thinking": "Plan first.", "text": "Writing a file.", "tool_calls": [bash]},
            {"text": "f.txt has 2 lines.\n\n- done"},
        ],
    )
    live = tether(
        tmp_path, "run", "--output", output, "--script", script, "--provider", "scripted", "t"
    )
    assert live.returncode == 0, live.stderr
    run_id = str(_latest(tmp_path)["id"])
    replayed = tether(tmp_path, "replay", run_id, "--output", output)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == live.stdout
    assert replayed.stderr == live.stderr
    assert "f.txt has 2 lines." in live.stdout


def test_runs_and_show(tmp_path: Path) -> None:
    assert "no runs yet" in tether(tmp_path, "runs").stdout
    script = _quick(tmp_path)
    assert (
        tether(tmp_path, "run", "--script", script, "--provider", "scripted", "notes").returncode
        == 0
    )
    listing = tether(tmp_path, "runs")
    assert listing.returncode == 0
    assert "done" in listing.stdout
    assert "notes" in listing.stdout
    show = tether(tmp_path, "show", "latest")
    assert show.returncode == 0, show.stderr
    assert "tool calls:    1" in show.stdout
    assert "final answer:" in show.stdout
    summary = json.loads(tether(tmp_path, "show", "latest", "--json").stdout)
    assert summary["turns"] == 1
    assert summary["controls"] == {"prompt": 1, "close": 1}
    missing = tether(tmp_path, "show", "nope")
    assert missing.returncode == 2
    assert "no run matches 'nope'" in missing.stderr


@pytest.mark.slow
def test_demo(tmp_path: Path) -> None:
    out = tether(tmp_path, "demo")
    assert out.returncode == 0, out.stderr
    assert "Done. notes/a.txt has 3 lines" in out.stdout
    assert "Time is nearly up, so here is what I have" in out.stdout
    statuses = [
        json.loads(line)["status"]
        for line in tether(tmp_path, "runs", "--json").stdout.splitlines()
    ]
    assert sorted(statuses) == ["cancelled", "done", "done"]


def test_inbox_lines_longer_than_a_drain_slice_do_not_wedge_the_run(tmp_path: Path) -> None:
    """A tool appends a 1.1 MB and a 2 MiB inbox line (over the parent's 1 MiB drain
    slice, under the 16 MiB line limit) and a small one: the run ends (it used to spin at
    100% CPU for ever, deaf to SIGTERM), and every line is stored in order."""
    write = (
        "import json, os\n"
        "with open(os.environ['TETHER_INBOX_PATH'], 'a') as inbox:\n"
        "    for n in (1_100_000, 2 << 20):\n"
        "        inbox.write(json.dumps({'type': 'progress', 'text': 'x' * n}) + '\\n')\n"
        "    inbox.write(json.dumps({'type': 'progress', 'text': 'after'}) + '\\n')\n"
    )
    (tmp_path / "write.py").write_text(write)
    tool = {"name": "bash", "arguments": {"command": f"{sys.executable} write.py"}}
    script = _script(tmp_path, [{"text": "Writing.", "tool_calls": [tool]}, {"text": "Done."}])
    out = tether(tmp_path, "run", "--no-stdin", "--provider", "scripted", "--script", script, "t")
    assert (out.returncode, out.stdout) == (0, "Done.\n"), out.stderr
    run_id = str(_latest(tmp_path)["id"])
    listed = tether(tmp_path, "inbox", run_id, "--json", "--no-drain")
    texts = [json.loads(line)["body"]["text"] for line in listed.stdout.splitlines()]
    assert [len(t) for t in texts] == [1_100_000, 2 << 20, len("after")]
