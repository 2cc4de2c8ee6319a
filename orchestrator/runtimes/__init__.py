"""The runtimes a plan's arm can name (``catalog``: one entry each) and the adapters that launch and
parse the ones hosts run as processes of their own; the harness engines (`rawloop-*`) run through
the harness CLI or app instead."""
