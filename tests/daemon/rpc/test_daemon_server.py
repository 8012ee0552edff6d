"""A real daemon process under hostile and heavy clients."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import socket
import stat
import struct
import subprocess
import sys

import pytest
from tests.support.daemon import DaemonProcess, call, frame, read_frame, rss_kib

from tether.daemon.rpc.aclient import AsyncDaemonClient
from tether.daemon.rpc.protocol import ErrorCode, RpcError


class _AnyMessage(str):
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str)

    __hash__ = str.__hash__


ANY_MESSAGE = _AnyMessage()


def assert_error(reply: dict[str, object] | None, id: int, code: ErrorCode) -> str:
    assert reply is not None, "connection closed without an answer"
    assert set(reply) == {"id", "error"}, reply
    assert reply["id"] == id
    error = reply["error"]
    assert isinstance(error, dict)
    assert error["code"] == code.value
    assert isinstance(error["message"], str)
    return error["message"]


def assert_serving(daemon: DaemonProcess) -> None:
    with daemon.connect() as sock:
        reply = call(sock, 1, "daemon.status")
        assert "result" in reply, reply


# -- hostile frames -----------------------------------------------------------------------------


def test_huge_prefix_is_answered_and_closed_without_allocating(daemon: DaemonProcess) -> None:
    before = rss_kib(daemon.pid)
    with daemon.connect() as sock:
        sock.sendall(b"\xff\xff\xff\xff" + b"A" * 65536)
        message = assert_error(read_frame(sock), 0, ErrorCode.MALFORMED_FRAME)
        assert message == "frame exceeds max size: 4294967295 > 16777216"
        assert read_frame(sock) is None  # closed
    assert rss_kib(daemon.pid) - before < 32 * 1024
    assert_serving(daemon)


def test_non_json_is_answered_and_closed(daemon: DaemonProcess) -> None:
    with daemon.connect() as sock:
        sock.sendall(struct.pack("<I", 8) + b"not json")
        message = assert_error(read_frame(sock), 0, ErrorCode.MALFORMED_FRAME)
        assert message.startswith("malformed json frame: ")
        assert read_frame(sock) is None
    assert_serving(daemon)


def test_bad_envelope_answers_with_the_readable_id(daemon: DaemonProcess) -> None:
    with daemon.connect() as sock:
        sock.sendall(frame({"id": 41, "method": 12}))
        assert_error(read_frame(sock), 41, ErrorCode.MALFORMED_FRAME)
        assert read_frame(sock) is None


def test_a_response_with_both_result_and_error_is_malformed(daemon: DaemonProcess) -> None:
    with daemon.connect() as sock:
        sock.sendall(frame({"id": 5, "result": 1, "error": {"code": "busy", "message": "x"}}))
        message = assert_error(read_frame(sock), 5, ErrorCode.MALFORMED_FRAME)
        assert "both result and error" in message
        assert read_frame(sock) is None


@pytest.mark.parametrize("method", ["agent.spawn", None], ids=["request", "response"])
def test_a_frame_nested_100000_deep_is_answered_with_its_id(
    daemon: DaemonProcess, method: str | None
) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    body = b'{"id":7,' + (b'"method":"%s","params":' % method.encode() if method else b'"result":')
    body += deep + b"}"
    with daemon.connect() as sock:
        sock.sendall(struct.pack("<I", len(body)) + body)
        message = assert_error(read_frame(sock), 7, ErrorCode.MALFORMED_FRAME)
        assert "nested deeper than" in message
    assert_serving(daemon)
    assert "Traceback" not in daemon.stderr()


def test_truncated_frame_then_close_leaves_the_daemon_up(daemon: DaemonProcess) -> None:
    with daemon.connect() as sock:
        sock.sendall(struct.pack("<I", 100) + b'{"id":1,')
        sock.shutdown(socket.SHUT_WR)
        assert read_frame(sock) is None
    assert_serving(daemon)
    assert "connection closed mid-frame" in daemon.stderr()


def test_unknown_namespace_and_method_keep_the_connection(daemon: DaemonProcess) -> None:
    with daemon.connect() as sock:
        message = assert_error(call(sock, 1, "bogus.verb"), 1, ErrorCode.UNKNOWN_METHOD)
        assert "unknown namespace 'bogus'" in message
        assert_error(call(sock, 2, "nodot"), 2, ErrorCode.UNKNOWN_METHOD)
        message = assert_error(call(sock, 3, "channel.nope"), 3, ErrorCode.UNKNOWN_METHOD)
        assert "no handler" in message
        assert_error(call(sock, 4, "channel.register_channel", [1]), 4, ErrorCode.INVALID_PARAMS)
        assert "result" in call(sock, 5, "daemon.status")


def test_half_a_frame_stalls_only_its_own_connection(daemon: DaemonProcess) -> None:
    whole = frame({"id": 77, "method": "daemon.status", "params": "x" * 1000})
    with daemon.connect() as staller:
        staller.sendall(whole[:500])
        # The default frame timeout is 30 s; each call below must be answered long before.
        for index in range(20):
            with daemon.connect(timeout=5.0) as other:
                assert "result" in call(other, index + 1, "daemon.status")
        staller.sendall(whole[500:])
        reply = read_frame(staller)
        assert reply is not None
        assert reply["id"] == 77
        assert "result" in reply


def test_a_stalled_frame_times_out(daemon_env: DaemonProcess) -> None:
    daemon = daemon_env.start("--frame-timeout", "0.3")
    with daemon.connect() as sock:
        sock.sendall(struct.pack("<I", 50) + b"{")
        message = assert_error(read_frame(sock), 0, ErrorCode.MALFORMED_FRAME)
        assert "not completed within 0.3s" in message
        assert read_frame(sock) is None


# -- concurrency and caps -----------------------------------------------------------------------


@pytest.mark.slow
def test_200_concurrent_clients(daemon: DaemonProcess) -> None:
    async def one(index: int) -> list[object]:
        async with await AsyncDaemonClient.open(daemon.socket) as client:
            calls = [client.call("daemon.status") for _ in range(5)]
            params = {"channel_id": f"{index}", "envelope": "not an envelope"}
            bad = await client.call_response("channel.push_to_channel", params)
            assert bad.error == RpcError(ErrorCode.INVALID_PARAMS, ANY_MESSAGE)
            return list(await asyncio.gather(*calls))

    async def main() -> list[list[object]]:
        return list(await asyncio.gather(*(one(i) for i in range(200))))

    results = asyncio.run(main())
    assert len(results) == 200
    assert all(len(r) == 5 and all(isinstance(x, dict) for x in r) for r in results)
    assert_serving(daemon)


def test_connection_cap_answers_busy(daemon_env: DaemonProcess) -> None:
    daemon = daemon_env.start("--max-connections", "2")
    with daemon.connect() as first, daemon.connect() as second:
        assert "result" in call(first, 1, "daemon.status")
        assert "result" in call(second, 1, "daemon.status")
        with daemon.connect() as third:
            assert_error(read_frame(third), 0, ErrorCode.BUSY)
            assert read_frame(third) is None
    assert_serving(daemon)


def test_answers_come_back_by_id_in_completion_order(daemon: DaemonProcess) -> None:
    """Push 1 is held by the receiver until push 2 is delivered: 2 is answered first."""

    async def main() -> list[int]:
        receiver = await AsyncDaemonClient.open(daemon.socket)
        first_seen, second_seen = asyncio.Event(), asyncio.Event()

        async def on_request(request: object) -> object:
            content = request.params["envelope"]["params"]["content"]  # type: ignore[attr-defined]
            if content == "one":
                first_seen.set()
                await second_seen.wait()
            else:
                second_seen.set()
            return {"ok": True}

        receiver.on_request = on_request
        channel = (await receiver.call("channel.register_channel", {"session_id": "s"}))[
            "channel_id"
        ]
        pusher = await AsyncDaemonClient.open(daemon.socket)
        order: list[int] = []

        async def push(index: int, content: str) -> None:
            envelope = {
                "jsonrpc": "2.0",
                "method": "notifications/claude/channel",
                "params": {"content": content, "meta": {}},
            }
            result = await pusher.call(
                "channel.push_to_channel", {"channel_id": channel, "envelope": envelope}
            )
            assert result == {"routed": True, "delivered": True}
            order.append(index)

        first = asyncio.ensure_future(push(1, "one"))
        await first_seen.wait()  # the receiver holds push 1 when push 2 goes
        await asyncio.gather(first, push(2, "two"))
        await pusher.close()
        await receiver.close()
        return order

    assert asyncio.run(main()) == [2, 1]


def test_in_flight_cap_answers_busy(daemon_env: DaemonProcess) -> None:
    daemon = daemon_env.start("--max-in-flight-per-connection", "1", "--deliver-timeout", "5")
    with daemon.connect() as receiver, daemon.connect() as pusher:
        channel = call(receiver, 1, "channel.register_channel", {"session_id": "s"})["result"]
        assert isinstance(channel, dict)
        envelope = {
            "jsonrpc": "2.0",
            "method": "notifications/claude/channel",
            "params": {"content": "x", "meta": {}},
        }
        push = {"channel_id": channel["channel_id"], "envelope": envelope}
        pusher.sendall(frame({"id": 1, "method": "channel.push_to_channel", "params": push}))
        delivery = read_frame(receiver)  # the first push is now in flight, unanswered
        assert delivery is not None
        assert delivery["method"] == "channel.deliver"
        pusher.sendall(frame({"id": 2, "method": "channel.push_to_channel", "params": push}))
        assert_error(read_frame(pusher), 2, ErrorCode.BUSY)
        receiver.sendall(frame({"id": delivery["id"], "result": None}))
        reply = read_frame(pusher)
        assert reply == {"id": 1, "result": {"routed": True, "delivered": True}}


# -- lifecycle ----------------------------------------------------------------------------------


def test_socket_and_directory_are_private(daemon: DaemonProcess) -> None:
    assert stat.S_IMODE(os.stat(daemon.socket).st_mode) == 0o600
    assert stat.S_ISSOCK(os.lstat(daemon.socket).st_mode)
    assert stat.S_IMODE(os.stat(daemon.socket.parent).st_mode) == 0o700
    lock = daemon.socket.with_name(daemon.socket.name + ".lock")
    assert stat.S_IMODE(os.stat(lock).st_mode) == 0o600


def test_a_second_daemon_is_refused_by_the_lock(daemon: DaemonProcess) -> None:
    argv = [sys.executable, "-m", "tether", "daemon", "--foreground"]
    second = subprocess.run(
        argv, env=daemon.env, capture_output=True, text=True, timeout=30, check=False
    )
    assert second.returncode == 2
    assert f"already running (pid {daemon.pid})" in second.stderr
    assert_serving(daemon)


def test_a_shared_socket_directory_is_refused(daemon_env: DaemonProcess) -> None:
    shared = daemon_env.root / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    env = dict(daemon_env.env, TETHER_SOCKET=str(shared / "d.sock"))
    argv = [sys.executable, "-m", "tether", "daemon", "--foreground"]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert "has mode 0755; it must be 0700" in result.stderr
    assert not (shared / "d.sock").exists()


def test_a_symlinked_socket_directory_is_refused(daemon_env: DaemonProcess) -> None:
    real = daemon_env.root / "real"
    real.mkdir(mode=0o700)
    link = daemon_env.root / "link"
    link.symlink_to(real)
    env = dict(daemon_env.env, TETHER_SOCKET=str(link / "d.sock"))
    argv = [sys.executable, "-m", "tether", "daemon", "--foreground"]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert "not a usable directory" in result.stderr


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"]
)
def test_a_stop_signal_answers_blocked_calls_shutting_down(
    daemon: DaemonProcess, sig: signal.Signals
) -> None:
    """SIGTERM, SIGINT and SIGHUP (a closed terminal under --foreground) stop it alike."""
    with daemon.connect() as receiver, daemon.connect() as pusher:
        channel = call(receiver, 1, "channel.register_channel", {"session_id": "s"})["result"]
        assert isinstance(channel, dict)
        envelope = {
            "jsonrpc": "2.0",
            "method": "notifications/claude/channel",
            "params": {"content": "x"},
        }
        params = {"channel_id": channel["channel_id"], "envelope": envelope}
        pusher.sendall(frame({"id": 9, "method": "channel.push_to_channel", "params": params}))
        assert read_frame(receiver) is not None  # delivered, never answered
        assert daemon.proc is not None
        daemon.proc.send_signal(sig)
        assert_error(read_frame(pusher), 9, ErrorCode.SHUTTING_DOWN)
        assert read_frame(pusher) is None
        assert daemon.proc.wait(10) == 0
    assert not daemon.socket.exists()


def test_sigkill_leaves_a_stale_socket_that_a_new_daemon_replaces(daemon: DaemonProcess) -> None:
    daemon.stop(signal.SIGKILL)
    assert daemon.socket.exists()
    daemon.start()
    assert_serving(daemon)


def test_peer_of_another_user_is_refused(daemon: DaemonProcess) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to connect as another uid")
    code = (
        "import os, socket, sys\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX); s.settimeout(5)\n"
        "try:\n    s.connect(sys.argv[1])\n"
        "except OSError as e:\n    print('denied', e); sys.exit()\n"
        "try:\n"
        "    s.sendall(b'\\x02\\x00\\x00\\x00{}')\n"
        "    print('eof' if s.recv(10) == b'' else 'answered')\n"
        "except ConnectionError:\n"
        "    print('eof')\n"
    )
    # The 0700 directories already stop another user; open them up to reach the peer check.
    daemon.root.chmod(0o711)
    daemon.socket.parent.chmod(0o711)
    daemon.socket.chmod(0o666)
    try:
        out = subprocess.run(
            [sys.executable, "-c", code, str(daemon.socket)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        daemon.root.chmod(0o700)
        daemon.socket.parent.chmod(0o700)
        daemon.socket.chmod(0o600)
    assert out.stdout.strip() == "eof", out
    assert "refusing a connection from uid 65534" in daemon.stderr()


def test_a_half_closed_client_still_gets_its_answers(daemon: DaemonProcess) -> None:
    with daemon.connect() as receiver, daemon.connect() as pusher:
        channel = call(receiver, 1, "channel.register_channel", {"session_id": "s"})["result"]
        assert isinstance(channel, dict)
        envelope = {
            "jsonrpc": "2.0",
            "method": "notifications/claude/channel",
            "params": {"content": "x"},
        }
        params = {"channel_id": channel["channel_id"], "envelope": envelope}
        pusher.sendall(
            frame({"id": 1, "method": "daemon.status"})
            + frame({"id": 2, "method": "channel.push_to_channel", "params": params})
        )
        pusher.shutdown(socket.SHUT_WR)
        delivery = read_frame(receiver)
        assert delivery is not None
        receiver.sendall(frame({"id": delivery["id"], "result": None}))
        first, second = read_frame(pusher), read_frame(pusher)
        assert first is not None
        assert first["id"] == 1
        assert second == {"id": 2, "result": {"routed": True, "delivered": True}}
        assert read_frame(pusher) is None


def test_a_socket_path_that_is_too_long_is_explained(daemon_env: DaemonProcess) -> None:
    deep = daemon_env.root / ("d" * 60) / ("e" * 60)
    env = dict(daemon_env.env, TETHER_SOCKET=str(deep / "d.sock"))
    argv = [sys.executable, "-m", "tether", "daemon", "--foreground"]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert "Unix sockets allow at most 107" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_client_that_never_reads_is_throttled(daemon: DaemonProcess) -> None:
    """Answers pile up unread; reading from that client stops (the kernel's socket buffers
    and the daemon's pause_reading on pause_writing), memory stays bounded, and everyone
    else is still served."""
    before = rss_kib(daemon.pid)
    request = frame({"id": 1, "method": "daemon.status"})
    batch = request * 1000
    sent = 0
    with daemon.connect() as hog:
        hog.setblocking(False)
        while sent < 20 * 1024 * 1024:
            try:
                sent += hog.send(batch)
            except BlockingIOError:
                _, writable, _ = select.select([], [hog], [], 3.0)
                if not writable:
                    break  # the daemon stopped reading us
        else:
            pytest.fail("the daemon kept reading from a client that never reads")
        assert rss_kib(daemon.pid) - before < 64 * 1024
        assert_serving(daemon)
