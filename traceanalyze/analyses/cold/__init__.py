"""Cold start: the one-off work of first calls against the steady calls."""
