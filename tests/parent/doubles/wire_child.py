"""TEST DOUBLE: a small wire child for the parent's tests (not the real ``tether child``).

It follows the state table (``tether.wire.session``) with a simulated agent: a turn
takes ``--turn-ms`` (steering is injected and interrupts land as their controls
arrive), and answers "answer: <prompt text> [+ steer texts]". ``--mode`` makes it
misbehave in the ways the parent must survive:

  normal             follow the protocol
  no-ready           never write anything
  die-mid-turn       SIGKILL itself after turn-started
  ignore-cancel      never ack cancel, ignore SIGTERM, keep a grandchild in the group
  silent             write ready, then never read a control again
  foreign-run        write one event for another run first
  bad-line           write one malformed line first
  truncate-events    truncate its event file when a steer arrives
  version-mismatch   write a v:2 line after ready
  long-result        a 100 KB answer via final-text-path
  long-result-nofile a 100 KB answer cut, without final-text-path
  linger             write exit done, then keep running
  exit-code          exit 3 right after ready, without an exit event
  slow-start         answer controls before ready, until the task's prompt and one more are
                     answered (the `starting` row: the test's control, however late it comes)

With ``--turn-ms -1`` a turn never ends by itself (only a control ends it).
With ``--gate PATH`` a turn's simulated work ends when the test appends a line to PATH
(one line per turn or follow-up), not after ``--turn-ms``: a test that acts inside a
turn decides by its own events, however slow the machine.

Every event carries an extra ``child-state`` member: the double's state after it.
It waits on its control file with tether's FileWatcher (inotify), bounded only by when its
simulated turn or its deadline ends; a mode that hangs blocks in ``signal.pause``. Like
Fen's child it knows wire v1 only: tether's extensions (``answer``, ``unqueue``) are
rejected as unknown controls.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from tether.transports.watch import FileWatcher
from tether.wire import Receiver, Rejection, Sender, rejection_ack, tag_of
from tether.wire import messages as m
from tether.wire.session import Effect, Internal, State, advance, decide_for_run, is_terminal


def hang() -> None:
    """Block for good (until a signal ends the process): a child that stopped working."""
    while True:
        signal.pause()


class Child:
    def __init__(self, mode: str, turn_ms: int, gate: str | None = None) -> None:
        self.mode = mode
        self.turn_s = turn_ms / 1000 if turn_ms >= 0 else float("inf")  # -1: endless
        self.gate = gate  # with a gate, a turn (or follow-up) ends when the test opens it
        self.opened = 0  # gate lines used: one per turn or follow-up ended by the gate
        self.run = os.environ.get("FEN_WIRE_RUN_ID", "run")
        self.control_path = os.environ["FEN_WIRE_CONTROL_PATH"]
        self.event_path = os.environ["FEN_WIRE_EVENT_PATH"]
        deadline = os.environ.get("FEN_WIRE_DEADLINE")
        self.deadline = float(deadline) if deadline else None
        self.sender = Sender(self.run)
        self.receiver = Receiver("control")
        self.state = State.STARTING
        self.offset = 0
        self.buffer = b""
        self.turn = 0
        self.turn_end: float | None = None  # a turn runs until this monotonic time
        self.turn_text = ""
        self.final_turn = False
        self.steering: list[tuple[int, str]] = []
        self.follow_ups: list[tuple[int, str]] = []
        self.answer = ""
        self.usage = {"input": 0, "output": 0}
        self.watcher = FileWatcher()
        self.watcher.watch(self.control_path)
        if gate is not None:
            self.watcher.watch(gate)
        self.answered = 0  # controls answered

    # -- output ----------------------------------------------------------------------

    def emit_line(self, line: bytes) -> None:
        fd = os.open(self.event_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line + b"\n")
        finally:
            os.close(fd)

    def emit(self, cls: type[m.Message], **fields: object) -> None:
        line = self.sender.next(cls, **fields)
        assert isinstance(line, bytes), line
        self.emit_stated(line)

    def emit_payload(self, payload: dict[str, object]) -> None:
        line = self.sender.next_payload(payload)
        assert isinstance(line, bytes), line
        self.emit_stated(line)

    def emit_stated(self, line: bytes) -> None:
        """Add an extra ``child-state`` member (objects are open) so tests can compare."""
        obj = json.loads(line)
        obj["child-state"] = str(self.state)
        self.emit_line(json.dumps(obj, separators=(",", ":")).encode())

    # -- controls --------------------------------------------------------------------

    def read_controls(self) -> list[bytes]:
        try:
            with open(self.control_path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        return lines

    def handle(self, line: bytes) -> None:
        message = self.receiver.receive(line)
        if isinstance(message, Rejection):
            if message.fatal:
                self.exit("failed", message.reason)
            self.emit_payload({"type": "control-ack", **rejection_ack(message)})
            return
        kind = tag_of(type(message))
        if kind in ("answer", "unqueue"):  # wire v1 only, as Fen's child
            reason = f"unknown control type: {kind}"
            self.emit(m.ControlAck, status="rejected", ref=message.seq, reason=reason)
            return
        if self.mode == "ignore-cancel" and kind == "cancel":
            hang()  # without acknowledging (SIGTERM is ignored too)
        decision = decide_for_run(self.state, kind, message.run, self.run)
        fields: dict[str, object] = {"status": str(decision.ack), "ref": message.seq}
        if decision.reason:
            fields["reason"] = decision.reason
        if decision.ack == "accepted":
            self.state = decision.next_state
        self.emit(m.ControlAck, **fields)
        self.answered += 1
        if self.mode == "truncate-events" and kind == "steer":
            os.truncate(self.event_path, 0)
            hang()
        if decision.ack == "accepted":
            self.act(decision.effect, message)

    def act(self, effect: Effect, message: m.AnyMessage) -> None:
        text = getattr(message, "text", "")
        if effect is Effect.START_TURN:
            self.start_turn(text)
        elif effect is Effect.QUEUE_STEERING:
            self.steering.append((message.seq, text))
        elif effect is Effect.QUEUE_FOLLOW_UP:
            self.follow_ups.append((message.seq, text))
        elif effect is Effect.START_FINALIZE_TURN:
            self.drop_queued()
            self.start_turn("finalize", final=True)
        elif effect is Effect.INTERRUPT_TURN:
            self.drop_queued()
            self.end_turn("aborted")
        elif effect is Effect.FINISH:
            self.finish()
        elif effect is Effect.ABORT:
            if self.turn_end is not None:
                self.turn_end = None
                self.emit(m.TurnComplete, turn=self.turn, stop_reason="aborted")
            self.exit(str(self.state))

    def drop_queued(self) -> None:
        refs = [seq for seq, _ in self.steering + self.follow_ups]
        self.steering, self.follow_ups = [], []
        if refs:
            self.emit(m.Info, summary=f"dropped {len(refs)} queued controls", refs=refs)

    # -- turns -----------------------------------------------------------------------

    def start_turn(self, text: str, *, final: bool = False) -> None:
        self.turn += 1
        self.final_turn = final
        self.turn_text = text
        self.turn_end = time.monotonic() + self.turn_s
        self.emit(m.TurnStarted, turn=self.turn)
        self.emit(m.User, text=text)
        if self.mode == "die-mid-turn":
            sys.stderr.write("boom: simulated crash in the middle of a turn\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def turn_yield(self) -> None:
        """A cooperative yield inside a running turn: inject steering, maybe finish."""
        for seq, text in self.steering:
            self.emit(m.SteeringInjected, text=text, ref=seq)
            self.turn_text += f" + {text}"
        self.steering = []
        if self.turn_end is not None and self.turn_over():
            if self.follow_ups and not self.final_turn:
                seq, text = self.follow_ups.pop(0)
                self.emit(m.FollowUpInjected, text=text, ref=seq)
                self.turn_text += f" + {text}"
                self.turn_end = time.monotonic() + self.turn_s
                return
            self.end_turn("end_turn")

    def turn_over(self) -> bool:
        """The simulated work is done: ``--turn-ms`` passed, or the gate has a new line."""
        if self.gate is None:
            return self.turn_end is not None and time.monotonic() >= self.turn_end
        try:
            with open(self.gate, "rb") as handle:
                lines = handle.read().count(b"\n")
        except FileNotFoundError:
            lines = 0
        if lines <= self.opened:
            return False
        self.opened += 1
        return True

    def end_turn(self, stop_reason: str) -> None:
        self.turn_end = None
        usage = {"input": 10, "output": 5}
        self.usage = {k: self.usage[k] + usage[k] for k in usage}
        if stop_reason != "aborted":
            self.answer = f"answer: {self.turn_text}"
            self.emit(m.AssistantText, final=True, text=self.answer)
        internal = Internal.FINAL_TURN_DONE if self.final_turn else Internal.TURN_DONE
        move = advance(self.state, internal)
        self.state = move.next_state
        self.emit(m.TurnComplete, turn=self.turn, stop_reason=stop_reason, usage=usage)
        if move.effect is Effect.START_FINALIZE_TURN:
            self.start_turn("finalize", final=True)
        elif move.effect is Effect.FINISH:
            self.finish()
        elif move.effect is Effect.EXIT:
            self.exit(str(self.state))

    def finish(self) -> None:
        self.drop_queued()
        text = self.answer or "nothing to say"
        if self.mode in ("long-result", "long-result-nofile"):
            text = "x" * 100_000 + " END"
            cut = text[:60_000]
            fields: dict[str, object] = {"truncated": True}
            if self.mode == "long-result":
                spill = os.path.dirname(self.event_path)  # the run dir, as the real child does
                fd, path = tempfile.mkstemp(prefix="final-text-", suffix=".txt", dir=spill)
                os.write(fd, text.encode())
                os.close(fd)
                fields["final_text_path"] = path
            self.emit(m.Result, stop_reason="end_turn", final_text=cut, usage=self.usage, **fields)
        else:
            self.emit(m.Result, stop_reason="end_turn", final_text=text, usage=self.usage)
        self.exit("done")

    def exit(self, status: str, error: str | None = None) -> None:
        fields = {} if error is None else {"error": error}
        self.emit(m.Exit, status=status, **fields)
        if self.mode == "linger":
            hang()
        sys.exit(0 if status == "done" else 1)

    # -- main loop -------------------------------------------------------------------

    def starting_phase(self) -> None:
        """Answer controls while still starting (every one but cancel is rejected), until
        the task's prompt and the test's control have been answered: decided by what was
        read, not by when (the test's control may come in a later read than the prompt)."""
        while self.answered < 2:
            for line in self.read_controls():
                self.handle(line)
            if self.answered < 2:
                self.watcher.wait_sync()

    def main(self) -> None:
        if self.mode == "no-ready":
            hang()
        if self.mode == "foreign-run":
            other = Sender("someone-else").next(m.Info, summary="not yours")
            assert isinstance(other, bytes)
            self.emit_line(other)
            self.sender.seq = 1  # keep our seqs above the foreign line's
        if self.mode == "bad-line":
            self.emit_line(b"{not json")
        if self.mode == "slow-start":
            self.starting_phase()
        self.state = advance(self.state, Internal.STARTED).next_state
        self.emit(m.Ready)
        if self.mode == "exit-code":
            sys.exit(3)
        if self.mode == "version-mismatch":
            self.emit_line(b'{"v":2,"seq":99,"type":"ready","run":"' + self.run.encode() + b'"}')
        if self.mode == "silent":
            hang()
        if self.mode == "ignore-cancel":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            subprocess.Popen(["sleep", "3600"])  # a grandchild in our process group
        self.serve()

    def serve(self) -> None:
        """Answer controls and run turns until the run is over (the deadline included)."""
        while not is_terminal(self.state):
            if self.deadline is not None and time.time() >= self.deadline:
                self.state = advance(self.state, Internal.DEADLINE).next_state
                self.exit(str(self.state), "run deadline exceeded")
            for line in self.read_controls():
                self.handle(line)
            if self.turn_end is not None:
                self.turn_yield()
            if not is_terminal(self.state):
                self.watcher.wait_sync(self.next_due())

    def next_due(self) -> float | None:
        """Seconds until the turn or the deadline ends (None: only a control can wake us)."""
        dues = []
        if self.turn_end is not None and self.gate is None and self.turn_end != float("inf"):
            dues.append(self.turn_end - time.monotonic())
        if self.deadline is not None:
            dues.append(self.deadline - time.time())
        return max(0.0, min(dues)) if dues else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="normal")
    parser.add_argument("--turn-ms", type=int, default=150)
    parser.add_argument("--gate", help="a file: each line the test appends ends one turn")
    args = parser.parse_args()
    Child(args.mode, args.turn_ms, args.gate).main()


if __name__ == "__main__":
    main()
