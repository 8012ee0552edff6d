"""Where the state table meets real processes: the live child presenter and its helpers.

Kept import-light: ``tether child`` must reach ``ready`` quickly, so nothing here is
imported until a submodule is asked for (:mod:`tether.runtime.child.presenter`,
:mod:`tether.runtime.parent.spawn`). The turn-runner interface the presenter drives lives one
layer down in :mod:`tether.agent.runner`; process-group handling in :mod:`tether.procs`.
"""

from __future__ import annotations
