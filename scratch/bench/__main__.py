"""python -m scratch.bench: the benchmark's command line (scratch.bench.cli)."""

from scratch.bench.cli import main

raise SystemExit(main())
