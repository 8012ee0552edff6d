"""The fleet: the daemon's agents behind one interface, the ``agent.*`` verbs over it, and
the wire agents (a long-lived wire child each, supervised through the parent's run driver),
their registry, their followers, their asks and answers.
"""
