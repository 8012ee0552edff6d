"""An agent's home attacked by the agent: what it plants there before its configuration is
written again (a resume, a follow-up to an ended daemon agent: the same home).

The agent lives in its home (``HOME``, ``CODEX_HOME``): a folder of it swapped for a
symlink to the user's own (``~/.pi``, ``~/.codex``), or the home itself a symlink, must
make the writer refuse, never write or chmod through it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tether.errors import SpawnError
from tether.runtime.child.adapters.config import plan_config, write_config

URL = "http://127.0.0.1:8123/t/token"


def _victim(tmp_path: Path) -> Path:
    """The user's own configuration folders, as she keeps them (0755, her files)."""
    real = tmp_path / "user"
    for folder, name in ((".pi/agent", "models.json"), (".codex", "config.toml")):
        (real / folder).mkdir(parents=True)
        (real / folder / name).write_text("hers\n")
    for folder in (real / ".pi", real / ".pi/agent", real / ".codex"):
        folder.chmod(0o755)
    return real


def _untouched(real: Path) -> None:
    for path in (real / ".pi/agent/models.json", real / ".codex/config.toml"):
        assert path.read_text() == "hers\n", path
    for folder in (real / ".pi", real / ".pi/agent", real / ".codex"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755, folder


@pytest.mark.parametrize(
    ("agent", "planted"),
    [("pi", ".pi"), ("pi", ".pi/agent"), ("codex", ".codex"), ("pi", ""), ("codex", "")],
    ids=["pi-dot-pi", "pi-agent-folder", "codex-home", "pi-home", "codex-whole-home"],
)
def test_attack_a_folder_of_the_home_planted_as_a_symlink_is_never_written_through(
    tmp_path: Path, agent: str, planted: str
) -> None:
    real = _victim(tmp_path)
    home = tmp_path / "homes" / "a1"
    config = plan_config(agent, URL, str(home))
    write_config(config)  # the first run's
    # the agent, in its home, swaps a folder (or the home itself) for the user's own
    where = home / planted if planted else home
    target = real / planted if planted else real
    os.rename(where, tmp_path / "moved")
    os.symlink(target, where)

    with pytest.raises(SpawnError, match="not a folder of its own"):
        write_config(config)  # a resume's
    _untouched(real)
