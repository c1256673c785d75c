"""`python -m scratch.check package.module:function`: the checker's command line (see checker)."""

from scratch.checker.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
