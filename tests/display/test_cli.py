"""``tether display`` as users run it: a real subprocess over real files and pipes."""

from __future__ import annotations

from pathlib import Path

from display_helpers import SAMPLE_RUN, check_golden, replay, sample_frames, tether


def test_wire_file_renders_like_the_live_run() -> None:
    done = tether("display", "--from", "wire", "--width", "80", str(SAMPLE_RUN))
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""
    out, err = replay(SAMPLE_RUN)
    # The command draws to stdout; the live view of `tether run` goes to stderr when
    # stdout is not a terminal, and the answer to stdout after it.
    assert done.stdout.decode() == err + out


def test_wire_from_stdin_with_bad_lines(tmp_path: Path) -> None:
    lines = SAMPLE_RUN.read_bytes().splitlines(keepends=True)
    bad = [b"not json\n", b'{"v":2,"seq":1,"type":"ready","run":"x"}\n', b"[]\n", b"\n"]
    data = b"".join(lines[:5] + bad + lines[5:]) + b"x" * 70000 + b"\n"
    done = tether("display", "--from", "wire", "--width", "80", "-", stdin=data)
    assert done.returncode == 2
    text = done.stdout.decode()
    assert "! line 6: malformed" in text
    assert "! line 7: version-mismatch" in text
    assert "! line 8: malformed" in text
    assert "line 45: too-large" in text
    assert "Traceback" not in done.stderr.decode()
    assert text.endswith("The repo is a toolkit.\nIts docs/ has two guides.\n")


def test_resp_frames_from_bash_util_write_msg() -> None:
    frames = sample_frames()
    done = tether("display", "--from", "resp", "--width", "80", stdin=frames)
    assert done.returncode == 0, done.stderr
    check_golden("sample_frames.human.txt", done.stdout.decode())
    assert b"\x1b" not in done.stdout


def test_resp_frames_as_stream_json_and_back(tmp_path: Path) -> None:
    frames = tmp_path / "frames.bin"
    frames.write_bytes(sample_frames())
    done = tether("display", "--from", "resp", "--output", "stream-json", str(frames))
    assert done.returncode == 0, done.stderr
    check_golden("sample_frames.stream.jsonl", done.stdout.decode())
    stream = tmp_path / "stream.jsonl"
    stream.write_bytes(done.stdout)
    again = tether("display", "--from", "stream-json", "--output", "stream-json", str(stream))
    assert again.returncode == 0, again.stderr
    assert again.stdout == done.stdout
    human = tether("display", "--from", "stream-json", "--width", "80", str(stream))
    from_resp = tether("display", "--from", "resp", "--width", "80", str(frames))
    assert human.returncode == 0
    assert human.stdout == from_resp.stdout


def test_stream_json_of_a_run_renders(tmp_path: Path) -> None:
    out, _ = replay(SAMPLE_RUN, "stream-json")
    path = tmp_path / "run.jsonl"
    path.write_text(out + '{"type":"nope"}\nnot json\n', encoding="utf-8")
    done = tether("display", "--from", "stream-json", "--width", "80", str(path))
    assert done.returncode == 2
    text = done.stdout.decode()
    assert "» user: Summarise the repo." in text
    assert "→ bash" in text
    assert f"! line {out.count(chr(10)) + 2}: malformed" in text


def test_resp_garbage_is_reported_not_fatal() -> None:
    data = (
        b"*1\r\n$4\r\nNOPE\r\n" + b"garbage\r\n" + b"*2\r\n$4\r\nTEXT\r\n$2\r\nok\r\n*2\r\n$4\r\nTE"
    )
    done = tether("display", "--from", "resp", stdin=data)
    assert done.returncode == 2
    text = done.stdout.decode()
    assert "ok" in text
    assert "truncated" in text
    assert "Traceback" not in done.stderr.decode()


def test_usage_errors(tmp_path: Path) -> None:
    assert tether("display", "--from", "nope").returncode == 2
    missing = tether("display", "--from", "wire", str(tmp_path / "missing.jsonl"))
    assert missing.returncode == 2
    assert b"cannot read" in missing.stderr


BASH_AGENT_FRAMES = Path(__file__).parent / "fixtures" / "bash_agent_frames.sh"
BASH_AGENT_SESSION = (
    Path(__file__).parents[1] / "framing" / "fixtures" / "bash_agent_session.stream.jsonl"
)


def _bash_agent_frames() -> bytes:
    import subprocess

    done = subprocess.run(
        ["bash", str(BASH_AGENT_FRAMES)], capture_output=True, timeout=30, check=True
    )
    return done.stdout


def test_resp_frames_of_a_real_bash_agent_session() -> None:
    done = tether("display", "--from", "resp", "--width", "80", stdin=_bash_agent_frames())
    assert done.returncode == 0, done.stdout + done.stderr
    text = done.stdout.decode()
    check_golden("bash_agent_frames.human.txt", text)
    assert "» user: List the files here" in text
    assert text.count("· end_turn") == 1  # STOP end_turn twice per answer: drawn once
    assert '"timeout":1.50' in text  # the model's JSON as it came
    assert "└ sub_20261201-101600-1a2b ok · 300 in · 40 out" in text  # AGENT_RESULT


def test_resp_frames_of_bash_agent_as_stream_json() -> None:
    done = tether(
        "display", "--from", "resp", "--output", "stream-json", stdin=_bash_agent_frames()
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert lines[0] == (
        '{"type":"user_message","content":"List the files here, then count them.\\nUse the tools."}'
    )
    assert '{"type":"user_input","content":"and be quick"}' in lines
    assert any('"input":{"command":"ls -1", "timeout":1.50}' in line for line in lines)
    assert any('"checklist":"- [x] list","summary":"1/1 done"}' in line for line in lines)
    assert any('"kind":"agent"' in line for line in lines)
    assert not any("SESSION_END" in line for line in lines)
    assert any(
        line.startswith('{"type":"sub_agent_result","session_id":"sub_20261201-101600-1a2b"')
        for line in lines
    )


def test_stream_json_of_a_real_bash_agent_session() -> None:
    done = tether("display", "--from", "stream-json", "--width", "80", str(BASH_AGENT_SESSION))
    assert done.returncode == 0, done.stdout + done.stderr
    text = done.stdout.decode()
    check_golden("bash_agent_session.human.txt", text)
    assert "session_start" not in text
    again = tether(
        "display", "--from", "stream-json", "--output", "stream-json", str(BASH_AGENT_SESSION)
    )
    assert again.returncode == 0, again.stderr
    original = BASH_AGENT_SESSION.read_bytes().replace(b'"fork":}', b'"fork":null}')
    assert again.stdout == original
