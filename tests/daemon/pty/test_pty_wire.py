"""The sans-IO parts under PTY agents: the output ring, holder frames, the WebSocket peer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tether.daemon.pty.frames import (
    ExitInfo,
    Hello,
    HolderFrame,
    HolderRejection,
    Kind,
    OutputRing,
    Resize,
    check_size,
    decode_holder_frame,
    decode_json,
    encode,
)
from tether.daemon.rpc.protocol import FrameDecoder
from tether.transports.ws import WsBinary, WsClosed, WsOpen, WsPeer, WsRequest, WsText
from tether.wire.needdata import NEED_DATA


def test_ring_keeps_the_newest_bytes_and_starts_at_a_line() -> None:
    ring = OutputRing(limit=100)
    for index in range(50):
        ring.append(f"line {index:03d}\n".encode())
    content = ring.content()
    assert len(content) <= 100
    assert content.endswith(b"line 049\n")
    assert content.startswith(b"line ")  # cut at a line start, not mid-line
    assert ring.dropped + len(ring) == 50 * 9


@given(st.lists(st.binary(max_size=300), max_size=40))
def test_ring_never_exceeds_its_limit(chunks: list[bytes]) -> None:
    ring = OutputRing(limit=256)
    everything = b""
    for chunk in chunks:
        ring.append(chunk)
        everything += chunk
        assert len(ring) <= 256
    assert everything.endswith(ring.content())


def test_frames_round_trip_through_the_daemon_frame_codec() -> None:
    decoder = FrameDecoder()
    decoder.feed(encode(Kind.HELLO, Hello(pid=7, cols=80, rows=24)) + encode(Kind.OUTPUT, b"x"))
    first, second = decoder.next_frame(), decoder.next_frame()
    assert decoder.next_frame() is NEED_DATA
    assert isinstance(first, bytes)
    assert isinstance(second, bytes)
    hello = decode_holder_frame(first)
    assert isinstance(hello, HolderFrame)
    assert decode_json(hello) == Hello(pid=7, cols=80, rows=24)
    assert decode_holder_frame(second) == HolderFrame(Kind.OUTPUT, b"x")
    assert decode_json(HolderFrame(Kind.EXIT, b'{"code": 3}')) == ExitInfo(code=3)
    assert isinstance(
        decode_json(HolderFrame(Kind.RESIZE, b'{"cols": 0, "rows": 1}')), HolderRejection
    )
    assert isinstance(decode_json(HolderFrame(Kind.OUTPUT, b"")), HolderRejection)
    assert check_size(80, 24) == (80, 24)
    assert isinstance(check_size(True, 24), HolderRejection)
    assert Resize(cols=1, rows=1000) == decode_json(
        HolderFrame(Kind.RESIZE, b'{"cols": 1, "rows": 1000}')
    )


@given(st.binary(max_size=200))
def test_holder_frame_decoding_is_total(body: bytes) -> None:
    frame = decode_holder_frame(body)
    if isinstance(frame, HolderFrame):
        decode_json(frame)


def test_ws_peers_talk_to_each_other_in_memory() -> None:
    client, server = WsPeer(client=True), WsPeer(client=False)
    events = server.feed(client.handshake("tether", "/agent/x", [("x-token", "t")]))
    assert isinstance(events[0], WsRequest)
    assert events[0].target == "/agent/x"
    assert events[0].headers["x-token"] == "t"
    assert client.feed(server.accept()) == [WsOpen()]
    assert server.feed(client.send_binary(b"keys")) == [WsBinary(b"keys")]
    assert client.feed(server.send_text('{"type": "attached"}')) == [WsText('{"type": "attached"}')]
    assert server.feed(client.close(1000, "bye")) == [WsClosed(1000, "bye")]
    assert client.feed(server.take_outgoing()) == [WsClosed(1000, "bye")]


def test_ws_text_over_the_limit_closes_1009() -> None:
    client, server = WsPeer(client=True), WsPeer(client=False, max_text=10)
    server.feed(client.handshake("tether", "/"))
    client.feed(server.accept())
    events = server.feed(client.send_text("x" * 11))
    assert events == [WsClosed(1009, "text message too large")]


@given(st.binary(max_size=500))
def test_ws_server_survives_any_bytes(data: bytes) -> None:
    server = WsPeer(client=False)
    for event in server.feed(data):
        assert isinstance(event, WsRequest | WsClosed)
    server.take_outgoing()
