from tether.cli import entrypoint

entrypoint()
