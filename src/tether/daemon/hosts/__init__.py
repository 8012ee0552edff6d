"""Many hosts: one daemon's link to a cluster, calls to another host's daemon, runs driven on
another host, and the bridge that carries a run's files over a channel.
"""
