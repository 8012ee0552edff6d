"""The parent's side: prepare and start a child, supervise it with the sans-IO
:mod:`~tether.runtime.parent.supervise` core, drive the run through one handle, and read
back what it left (final text, replay, nested runs).

Nothing is imported here: import the submodule you need (:mod:`tether.runtime.parent.spawn`).
"""
