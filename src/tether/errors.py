"""Every exception tether raises on purpose, as one tree rooted at :class:`TetherError`.

Decoders never raise: bad input comes back as a value (``wire.Rejection``,
``framing.resp.FrameRejection``, ``inbox.messages.InboxRejection``,
``daemon.protocol.ProtocolError``). Exceptions are for caller bugs and for what goes
wrong around a run. ``except tether.TetherError`` catches all of them; where a leaf also
derives from a built-in (``ValueError``, ``KeyError``, ``OSError``) that is said below::

    TetherError
    ├── ParentError                   (here) talking to a child run
    │   ├── SpawnError                (here) the child could not be started
    │   │   └── BadOptions            (here, ValueError) spawn options that cannot work
    │   │                             together, or name what does not exist (usage)
    │   ├── RunEnded                  (here) the run ended before a control was acknowledged
    │   ├── ControlRefused            (here, ValueError) a control does not encode
    │   └── AnswerRefused             inbox.answers (ValueError): a question cannot take it
    ├── AgentError                    (here) the built-in agent and its parts
    │   ├── ProviderError             agent.provider: a model call failed
    │   │   └── ProviderHTTPError     agent.providers: ... with an HTTP status
    │   ├── ProviderSetupError        agent.registry (ValueError): unknown or misconfigured
    │   ├── ScriptError               agent.scripted (ValueError): a bad scripted reply file
    │   ├── RunnerSetupError          agent.runner: the turn runner cannot start
    │   ├── UnknownToolError          agent.toolset (ValueError): a name in --tools
    │   ├── UnknownAgent              runtime.adapters.registry (ValueError): a name in --agent
    │   └── ModelTwice                runtime.adapters.commands (ValueError): --model and a
    │                                 --agent-arg model flag both name the model
    ├── DaemonError                   (here) the daemon and its clients
    │   ├── DaemonSetupError          daemon.lifecycle: the daemon cannot start
    │   │   ├── UnsafeSocketDir       daemon.lifecycle: wrong owner, mode or type
    │   │   └── AlreadyRunning        daemon.lifecycle: another daemon holds the lock
    │   ├── DaemonClientError         daemon.client
    │   │   ├── DaemonUnavailable     daemon.client: nothing answers on the socket
    │   │   ├── UntrustedDaemon       daemon.client: the server runs as another uid
    │   │   ├── DaemonConnectionLost  daemon.client: the daemon went away mid-call
    │   │   └── DaemonCallError       daemon.client: the daemon answered an error
    │   ├── RpcFailure                daemon.methods: a handler answers an error code
    │   ├── ConnectionClosed          daemon.rpc.connection: a client left before answering
    │   ├── FrameTooLarge             daemon.protocol (ValueError): a body over 16 MiB
    │   ├── AgentExists               daemon.registry: the name is taken
    │   └── AgentNotFound             daemon.registry (KeyError): no such agent
    ├── WorkspaceError                (here) an agent's git worktree: made, reviewed, merged
    │   ├── GitFailed                 workspace.errors: git itself failed where it should not
    │   └── WorkspaceRefused          workspace.errors (ValueError): nothing was done (exit 2)
    │       ├── NotARepository        the directory is in no git repository
    │       ├── BranchExists          the new worktree's branch is taken
    │       ├── BaseNotFound          the base names no commit
    │       ├── WorktreeTaken         another agent holds the worktree
    │       ├── UnmergedWork          removing the worktree would lose work
    │       ├── MergeConflict         the merge conflicts (the files named)
    │       ├── DirtyTarget           the base's checkout has changes in files it touches
    │       └── NoBaseBranch          the base is no branch to merge into
    ├── TransportError                transports.channel: a channel refused or failed
    │   ├── PartialAppend             transports.channel: append_many stored a prefix only
    │   ├── BadClusterURL             transports.cluster (ValueError): no transport takes
    │   │                             the URL's scheme (usage)
    │   ├── NoResponders              transports.cluster: nobody serves the request's subject
    │   └── RequestTimedOut           transports.cluster: no reply within the request's wait
    ├── TooDeep                       jsondepth (msgspec.DecodeError): JSON nested too deep;
    │                                 the decoders that call it return a rejection instead
    ├── TooMany                       jsondepth (msgspec.DecodeError): JSON holding too many
    │                                 arrays and objects (a CLI's stdout line), likewise
    ├── UnsafeFileError               fsafe (OSError): a file a child can touch is unsafe
    └── UnsafeDirectory               paths (PermissionError): another user could reach in

Lower layers' errors are translated once, where they enter: ``OSError`` from starting a
child becomes :class:`SpawnError` (``runtime.launch.start_child``); socket errors become
``DaemonUnavailable`` / ``DaemonConnectionLost`` (``daemon.client``); HTTP and stream
errors become ``ProviderError`` (``agent.providers``); NATS errors become
``TransportError`` (``transports.jetstream``, the only module that imports ``nats``).
``tests/test_errors.py`` keeps this tree and the code in step.

This module imports nothing from tether, so every layer may raise from it.
"""

from __future__ import annotations

__all__ = [
    "AgentError",
    "BadOptions",
    "ControlRefused",
    "DaemonError",
    "ParentError",
    "RunEnded",
    "SpawnError",
    "TetherError",
    "WorkspaceError",
]


class TetherError(Exception):
    """Base of every error tether raises on purpose."""


class ParentError(TetherError):
    """A problem talking to a child run."""


class SpawnError(ParentError):
    """The child could not be started (bad argv, missing executable, no permission)."""


class BadOptions(SpawnError, ValueError):
    """Spawn options that cannot work together or name what does not exist (an unknown
    agent or provider, a script that does not load): a usage error, found before anything
    of the run is created."""


class RunEnded(ParentError):
    """The run ended before the control was acknowledged (its result says how)."""


class ControlRefused(ParentError, ValueError):
    """The control could not be sent: it does not encode as a valid wire line."""


class AgentError(TetherError):
    """A problem in the built-in agent: its provider, script, runner or tools."""


class DaemonError(TetherError):
    """A problem running, reaching or serving the daemon."""


class WorkspaceError(TetherError):
    """A problem with an agent's git worktree: creating, reviewing, merging or removing it."""
