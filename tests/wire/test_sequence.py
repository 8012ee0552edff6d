from __future__ import annotations

from tether.wire import Code, ControlAck, Prompt, Receiver, Rejection, Sender, decode


def test_sender_stamps_increasing_seqs_and_skips_nothing_on_refusal() -> None:
    sender = Sender("r")
    first = sender.next(Prompt, text="a")
    refused = sender.next(ControlAck, status="accepted")  # ref missing: a caller bug
    second = sender.next(Prompt, text="b")
    assert isinstance(refused, Rejection)
    assert isinstance(first, bytes)
    assert isinstance(second, bytes)
    one, two = decode(first, "control"), decode(second, "control")
    assert isinstance(one, Prompt)
    assert isinstance(two, Prompt)
    assert (one.seq, two.seq) == (1, 2)
    assert sender.seq == 2


def test_sender_next_payload_uses_wire_keys() -> None:
    sender = Sender("run-1")
    line = sender.next_payload({"type": "tool-result", "name": "bash", "is-error?": True})
    assert line == (
        b'{"type":"tool-result","v":1,"seq":1,"run":"run-1","name":"bash","is-error?":true}'
    )
    assert isinstance(sender.next_payload({"type": "tool-result"}), Rejection)
    assert sender.seq == 1


def test_receiver_rejects_non_increasing_seq_without_a_seq() -> None:
    receiver = Receiver("control")
    assert (
        isinstance(receiver.receive('{"v":1,"seq":5,"type":"cancel","run":"r"}'), Rejection)
        is False
    )
    again = receiver.receive('{"v":1,"seq":5,"type":"close","run":"r"}')
    assert isinstance(again, Rejection)
    assert again.code == Code.OUT_OF_ORDER
    assert again.seq is None
    assert again.reason == "seq 5 does not follow 5"
    assert (again.type, again.run) == ("close", "r")


def test_receiver_consumes_a_readable_seq_even_when_the_payload_is_bad() -> None:
    receiver = Receiver("control")
    bad = receiver.receive('{"v":1,"seq":3,"type":"prompt","run":"r"}')
    assert isinstance(bad, Rejection)
    assert bad.code == Code.INVALID_PAYLOAD
    assert bad.seq == 3
    replay = receiver.receive('{"v":1,"seq":3,"type":"prompt","run":"r","text":"x"}')
    assert isinstance(replay, Rejection)
    assert replay.code == Code.OUT_OF_ORDER
    assert receiver.seq == 3


def test_receiver_lines_without_seq_do_not_move_it() -> None:
    receiver = Receiver("control")
    assert isinstance(receiver.receive("garbage"), Rejection)
    assert receiver.seq == 0


def test_fatal_rejection_skips_ordering() -> None:
    receiver = Receiver("control", last_seq=10)
    result = receiver.receive('{"v":9,"seq":1,"type":"cancel","run":"r"}')
    assert isinstance(result, Rejection)
    assert result.code == Code.VERSION_MISMATCH
    assert receiver.seq == 10
