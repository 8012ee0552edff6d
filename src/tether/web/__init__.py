"""``tether dashboard``: a local web page beside the daemon (a client of its socket).

- :mod:`tether.web.security`: the token, Host and Origin checks (sans-IO).
- :mod:`tether.web.http`: a small HTTP/1.1 + WebSocket server (h11, wsproto).
- :mod:`tether.web.app`: the page's routes and its JSON API under ``/api/``.
- :mod:`tether.web.server`: binding (loopback unless told otherwise) and running.
- ``static/``: the page, its script and styles, and xterm.js vendored from npm
  (``@xterm/xterm``, ``@xterm/addon-fit``, MIT, see ``static/XTERM-LICENSE``).
"""
