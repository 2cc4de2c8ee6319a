"""`python -m orchestrator` and the `orch` console script: Ctrl-C while the CLI's libraries load
(a second or two) is an interruption like any other, exit 130, not a traceback."""

import sys


def main() -> None:
    try:
        from orchestrator.cli import main as cli
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
    cli()


if __name__ == "__main__":
    main()
