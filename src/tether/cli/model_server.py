"""``tether model-server``: scripted replies over HTTP (:data:`DESCRIPTION`)."""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType

from tether.numbers import PORT

DESCRIPTION = """\
Serve scripted replies over HTTP: the scripted provider's replies (a JSON list of
replies, as for `tether run --provider scripted --script FILE`) as Anthropic Messages,
Gemini streamGenerateContent, OpenAI chat completions and responses, one reply per model
call, on 127.0.0.1. The first line on stdout is the base URL to give a CLI:
`listening on http://127.0.0.1:PORT/t/TOKEN`. The random token in its path keeps the
replies from other local users; a request without it is answered 404. Each request is
logged as one JSON line to --log (created 0600). Point a CLI at it, e.g.

  ANTHROPIC_BASE_URL=http://127.0.0.1:PORT/t/TOKEN ANTHROPIC_API_KEY=x claude -p ...

Runs until SIGTERM or Ctrl-C."""


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--script", required=True, help="the replies (a JSON list)")
    parser.add_argument("--port", type=PORT, default=0, help="the port (default: any free one)")
    parser.add_argument("--host", default="127.0.0.1", help="the address (default 127.0.0.1)")
    parser.add_argument("--log", help="append each request as one JSON line to this file")
    return parser


def main(argv: list[str], prog: str = "tether model-server") -> int:
    args = build_parser(prog).parse_args(argv)
    from tether.agent.scripted import ScriptError
    from tether.modelserver import APIS, ModelServer, Script

    try:
        script = Script.load(args.script)
        server = ModelServer(script, host=args.host, port=args.port, log=args.log, apis=APIS)
    except ScriptError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{prog}: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 4

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    print(f"listening on http://{args.host}:{server.port}/t/{server.token}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0
