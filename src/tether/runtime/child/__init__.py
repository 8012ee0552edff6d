"""The child's side: the live presenter that runs the state table over the two files, and the
adapters that put external agent CLIs (and RESP programs) behind the same wire.

Kept import-light: ``tether child`` must reach ``ready`` quickly.
"""
