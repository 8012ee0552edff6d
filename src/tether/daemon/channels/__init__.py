"""``channel.*``: channels that receive MCP channel notifications, stored so they outlive a
daemon restart, and the wiring of a Claude Code agent's own channel.
"""
