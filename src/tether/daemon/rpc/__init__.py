"""The daemon's socket: the sans-IO frame protocol, the method registry, the asyncio server,
its place on disk (socket directory, lock), and the blocking and asyncio clients.

Nothing here knows what an agent is; the verbs are registered by the parts above it.
"""
