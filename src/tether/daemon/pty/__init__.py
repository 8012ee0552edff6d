"""PTY agents: any interactive program on a pseudo-terminal held by a holder process that
outlives the daemon, the frames the holder and the daemon exchange, and ``agent.drive``.
"""
