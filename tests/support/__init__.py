"""What many test folders share: a daemon process, an agent daemon, the dashboard, a raw
WebSocket; their fixtures are registered in ``tests/conftest.py``."""
