"""An agent's work in the daemon: its git worktree and its conversation.

Theory of operation. ``agent.spawn {worktree: true | {base, branch}}`` gives the agent a
worktree of its own on ``tether/NAME`` (:mod:`tether.workspace`, through
:mod:`tether.runtime.parent.worktrees`): checked before anything exists
(:func:`resolve_spawn`), made once the agent's name is taken (:func:`open_agent_worktree`),
held by ``agent:NAME`` until the agent is removed; its row keeps ``{path, branch, base}``
(``agent.status`` shows them). A spawn with ``resume`` (a run id) continues that run
(:func:`tether.runtime.parent.continuation.continued`): a follow-up to an agent whose run
has ended does that for the agent's last run, under the same name and in the same
worktree; ``agent.fork`` does it with ``fork`` for a new agent (a new branch at the
source's work). :class:`Workspaces` serves ``agent.diff``, ``agent.merge`` and
``agent.fork``, and the worktree's part of ``agent.rm``: work merged nowhere is refused
unless ``force`` (drop it) or ``keep_branch`` (keep it on the branch).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from tether import workspace
from tether.daemon.fleet.params import SpawnParams, check_name
from tether.daemon.fleet.worktrees import agent_owner
from tether.daemon.rpc.methods import RpcFailure, decode_params, invalid_status
from tether.daemon.rpc.protocol import ErrorCode
from tether.errors import BadOptions, SpawnError
from tether.workspace import WorkspaceRefused, Worktree
from tether.workspace.snapshot import snapshot

if TYPE_CHECKING:
    from tether.daemon.fleet.fleet import Fleet
    from tether.daemon.fleet.replies import AgentStatus
    from tether.daemon.fleet.supervisor import Supervisor
    from tether.daemon.fleet.wire_agent import WireAgent
    from tether.daemon.rpc.server import CallContext, Daemon

__all__ = ["DiffParams", "DiffReply", "ForkParams", "MergeParams", "MergeReply", "Workspaces"]


def _invalid(message: str) -> RpcFailure:
    return RpcFailure(ErrorCode.INVALID_PARAMS, message)


# -- the verbs --------------------------------------------------------------------------------


class DiffParams(msgspec.Struct, frozen=True):
    name: str
    stat: bool = False


class MergeParams(msgspec.Struct, frozen=True):
    name: str
    squash: bool = False
    message: str | None = None


class ForkParams(msgspec.Struct, frozen=True):
    name: str
    new: str
    task: str | None = None


class DiffReply(msgspec.Struct, frozen=True, kw_only=True):
    """``agent.diff``: the agent's changes against its base, committed or not."""

    name: str
    branch: str
    base: str
    since: str
    files: list[str]
    text: str
    cut: bool = False  # the text or the file list stopped at its limit (the text says)


class MergeReply(msgspec.Struct, frozen=True, kw_only=True):
    """``agent.merge``: the base branch's new commit ("" when there was nothing to merge)."""

    name: str
    branch: str
    base: str
    commit: str
    previous: str
    files: list[str]
    committed: str
    checkout: str
    squash: bool


def _refused(exc: WorkspaceRefused) -> RpcFailure:
    return invalid_status(str(exc))


class Workspaces:
    """``agent.diff``, ``agent.merge``, ``agent.fork``; the worktree's part of ``agent.rm``
    and the resume of an ended agent by a follow-up (see the module docstring)."""

    def __init__(self, fleet: Fleet, supervisor: Supervisor) -> None:
        self.fleet = fleet
        self.sup = supervisor

    def register(self, daemon: Daemon) -> None:
        """The verbs; in a cluster, one naming another host's agent is answered there
        (:mod:`tether.daemon.fleet.elsewhere`)."""
        from tether.daemon.fleet.elsewhere import forwarding
        from tether.daemon.fleet.replies import AgentStatus

        verbs: dict[str, tuple[Any, type[Any]]] = {
            "agent.diff": (self.diff, DiffReply),
            "agent.merge": (self.merge, MergeReply),
            "agent.fork": (self.fork, AgentStatus),
        }
        elsewhere = self.fleet.elsewhere
        for method, (handler, reply) in verbs.items():
            wrapped = handler
            if elsewhere is not None:
                where = self.fleet.host_of
                wrapped = forwarding(method, reply, handler, elsewhere, where=where)
            daemon.methods.register(method, wrapped)

    def _worktree(self, name: str) -> Worktree:
        agent = self.fleet.require(check_name(name))
        found = agent.record.worktree
        path = found.get("path") if isinstance(found, dict) else None
        if not isinstance(path, str):
            raise invalid_status(f"agent {name!r} has no worktree (spawn it with worktree)")
        try:
            return workspace.load_worktree(path)
        except WorkspaceRefused as exc:
            raise invalid_status(f"agent {name!r}: {exc}") from None

    async def diff(self, context: CallContext, params: Any) -> DiffReply:
        args = decode_params(params, DiffParams)
        tree = self._worktree(args.name)
        found = await _git(workspace.diff, tree, stat=args.stat)
        return DiffReply(
            name=args.name,
            branch=found.branch,
            base=found.base,
            since=found.since,
            files=list(found.files),
            text=found.text,
            cut=found.cut,
        )

    async def merge(self, context: CallContext, params: Any) -> MergeReply:
        args = decode_params(params, MergeParams)
        tree = self._worktree(args.name)
        done = await _git(workspace.merge, tree, squash=args.squash, message=args.message)
        fields = msgspec.structs.asdict(done)
        return MergeReply(name=args.name, **{**fields, "files": list(done.files)})

    async def fork(self, context: CallContext, params: Any) -> AgentStatus:
        args = decode_params(params, ForkParams)
        source = self.fleet.require(check_name(args.name)).wire()
        check_name(args.new)
        if self.fleet.taken(args.new):
            raise RpcFailure(ErrorCode.AGENT_EXISTS, f"an agent named {args.new!r} already exists")
        spawn = SpawnParams(name=args.new, task=args.task, resume=source.run_id, fork=True)
        agent, _ = await self.sup.spawn(spawn)
        return agent.status()

    # -- rm -------------------------------------------------------------------------------

    async def check_rm(self, agent: WireAgent, *, force: bool, keep_branch: bool) -> None:
        """Refuse removing an agent whose worktree holds work merged nowhere (unless
        ``force`` or ``keep_branch``); nothing is changed."""
        if agent.record.worktree is None or force:
            return
        tree = self._worktree(agent.name)
        if keep_branch:  # what cannot go on the branch is refused before anything ends
            await _git(snapshot, tree)
            return
        pending = await _git(workspace.pending_work, tree)
        if pending:
            listed = ", ".join(pending[:5]) + (", ..." if len(pending) > 5 else "")
            raise invalid_status(
                f"agent {agent.name!r} has work not merged into {tree.base or 'its base'} "
                f"({len(pending)} file(s): {listed}); merge it first (tether agent merge), or "
                "remove it with --force (drops the work) or --keep-branch"
            )

    async def removed(self, agent: WireAgent, *, keep_branch: bool) -> None:
        """Remove the agent's worktree (and its branch unless ``keep_branch``)."""
        found = agent.record.worktree
        path = found.get("path") if isinstance(found, dict) else None
        if not isinstance(path, str):  # a spawn cut short (a SIGKILL) may have made one
            owner = agent_owner(agent.name)
            for orphan in await asyncio.to_thread(workspace.owned_by, owner):
                await _git(workspace.remove_worktree, orphan, force=True)
            return
        try:
            tree = workspace.load_worktree(path)
        except WorkspaceRefused:
            return  # gone already
        await _git(workspace.remove_worktree, tree, force=True, keep_branch=keep_branch)


async def _git(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A workspace call in a thread, its refusal an RPC error (``invalid_status``)."""
    try:
        return await asyncio.to_thread(function, *args, **kwargs)
    except WorkspaceRefused as exc:
        raise _refused(exc) from None
    except workspace.GitFailed as exc:
        raise RpcFailure(ErrorCode.INTERNAL, str(exc)) from None
    except (BadOptions, SpawnError) as exc:
        raise _invalid(str(exc)) from None
