"""``tether shell-lib``: print the path of the bash helper library.

Scripts source it: ``source "$(tether shell-lib)"`` gives ``tether_write_msg`` (one RESP-like
frame per single write), ``tether_read_msg`` (read one frame from stdin into
``TETHER_MSG``) and ``tether_inbox`` (one line appended to the run's inbox).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tether import exits


def library_path() -> Path:
    """Absolute path of ``tether.sh``, shipped inside the ``tether.framing`` package."""
    from tether.framing import SHELL_LIBRARY

    return SHELL_LIBRARY


def main(argv: list[str], prog: str) -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Print the absolute path of tether's bash helper library "
        '(tether_write_msg, tether_inbox). Use: source "$(tether shell-lib)"',
    )
    parser.parse_args(argv)
    path = library_path()
    if not path.is_file():
        print(
            f"{prog}: the bash library is missing from this installation ({path}); "
            "reinstall tether",
            file=sys.stderr,
        )
        return exits.USAGE
    print(path)
    return 0
