"""``python -m traceanalyze``: the ``traceanalyze`` command, where its script is not on PATH."""

from traceanalyze.cli import main

if __name__ == "__main__":
    main(prog_name="traceanalyze")
