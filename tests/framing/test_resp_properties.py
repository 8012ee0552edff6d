"""Hypothesis: frames round-trip, arbitrary bytes never raise, both readers always agree."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.framing.resp import FrameRejection, PureReader, encode_frame
from tether.framing.resp_hiredis import HiredisReader

fields_st = st.lists(st.binary(max_size=300), max_size=12)
# byte soup that is likely to look like frames
alphabet = st.sampled_from([b"*", b"$", b"\r\n", b"\r", b"\n", b"0", b"1", b"2", b"3", b"-", b"x"])
soup_st = st.one_of(
    st.binary(max_size=400),
    st.lists(alphabet, max_size=120).map(b"".join),
    st.lists(fields_st.map(encode_frame) | st.binary(max_size=8), max_size=8).map(b"".join),
)
cuts_st = st.lists(st.integers(min_value=1, max_value=50), max_size=40)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    out, i = [], 0
    for step in cuts:
        if i >= len(data):
            break
        out.append(data[i : i + step])
        i += step
    out.append(data[i:])
    return out


def run(cls: type[PureReader], chunks: list[bytes], **limits: int) -> list[object]:
    reader = cls(**limits)
    out: list[object] = []
    for chunk in chunks:
        reader.feed(chunk)
        for result in reader:
            assert isinstance(result, tuple | FrameRejection)
            out.append(result)
    out.append(reader.eof())
    return out


@settings(max_examples=300, deadline=None)
@given(frames=st.lists(fields_st, max_size=6), cuts=cuts_st)
def test_frames_round_trip_in_any_chunking(frames: list[list[bytes]], cuts: list[int]) -> None:
    data = b"".join(encode_frame(f) for f in frames)
    expected: list[object] = [tuple(f) for f in frames] + [None]
    assert run(PureReader, chunked(data, cuts)) == expected
    assert run(HiredisReader, chunked(data, cuts)) == expected


@settings(max_examples=200, deadline=None)
@given(fields=st.lists(st.text(max_size=50), max_size=10))
def test_text_fields_round_trip(fields: list[str]) -> None:
    encodable = [f.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for f in fields]
    frame = encode_frame(encodable)
    reader = PureReader()
    reader.feed(frame)
    assert reader.next() == tuple(f.encode() for f in encodable)


@settings(max_examples=500, deadline=None)
@given(data=soup_st, cuts=cuts_st)
def test_any_bytes_give_the_same_results_from_both_readers(data: bytes, cuts: list[int]) -> None:
    whole = run(PureReader, [data])
    assert run(PureReader, chunked(data, cuts)) == whole
    assert run(HiredisReader, [data]) == whole
    assert run(HiredisReader, chunked(data, cuts)) == whole


@settings(max_examples=200, deadline=None)
@given(data=soup_st, cuts=cuts_st, limit=st.integers(min_value=0, max_value=40))
def test_both_readers_agree_under_tight_limits(data: bytes, cuts: list[int], limit: int) -> None:
    limits = {"max_fields": limit % 5, "max_field_bytes": limit, "max_frame_bytes": limit * 3}
    whole = run(PureReader, [data], **limits)
    assert run(HiredisReader, chunked(data, cuts), **limits) == whole
    assert run(PureReader, chunked(data, cuts), **limits) == whole
