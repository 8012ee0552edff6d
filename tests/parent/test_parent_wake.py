"""Children the parent API starts are woken through their pipe: no inotify instance each.

The kernel allows 128 inotify instances per user; a parent with many children must not
spend one per child. Each child here answers controls while holding none (the parent's
own shared watcher is one instance for all of them).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.wake_probe import inotify_instances
from tether.runtime.parent.spawn import spawn

CHILDREN = 4


def test_many_children_answer_without_an_inotify_instance_each(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps([{"text": "one"}, {"text": "two"}]))
    args = ["--script", str(script)]

    async def go() -> list[str]:
        handles = [
            await spawn("t", provider="scripted", child_args=args, close_when_idle=False)
            for _ in range(CHILDREN)
        ]
        for handle in handles:
            assert (await handle.follow_up("more")).status == "accepted"
            assert inotify_instances(handle.pid) == 0
        for handle in handles:
            assert (await handle.close()).status == "accepted"
        return [(await handle.wait()).status for handle in handles]

    assert asyncio.run(go()) == ["done"] * CHILDREN
