# The two commands: `make demo` (set up, then run the main job) and `make test` (set up, lint, test).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint docs setup setup-dev sandbox browser bench redteam clean

# Each pack's oracle proves itself, then the offline AGENTS.md A/B on it (a simulated agent behind
# the real Pi CLI) and its report: the built-in pack, then the JavaScript pack (packs/notes-js).
demo: setup
	$(BIN)/rig calibrate
	.ci/isolated $(BIN)/rig run experiments/demo_agents_md.toml
	$(BIN)/rig report experiments/demo_agents_md.toml
	$(BIN)/rig calibrate --pack packs/notes-js
	.ci/isolated $(BIN)/rig run experiments/notes_js_demo_agents_md.toml
	$(BIN)/rig report experiments/notes_js_demo_agents_md.toml

# Tests run in a loopback-only network namespace where the machine allows it: first on two workers
# (pytest-xdist, a whole file per worker at a time, so module fixtures are built once; in the order
# tests/conftest.py gives, the slowest files first, not xdist's order by test count), then the
# tests marked `serial` with nothing else running (they scan the whole machine or change the venv).
TEST_WORKERS ?= 2
test: setup-dev lint
	.ci/isolated $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not serial"; \
	  parallel=$$?; .ci/isolated $(BIN)/python -m pytest -m serial && exit $$parallel

lint: setup-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# The generated reference pages of docs/reference/ (the CLI, the run record, pack.toml and task.toml),
# rewritten from the code; `$(BIN)/python docs/generate.py --check` says which are stale.
docs: $(VENV)/.installed
	$(BIN)/python docs/generate.py

NODE_STAMP := harnesses/node/node_modules/.package-lock.json
NPM_PREFETCH := build/npm-prefetch.stamp
ENV_WHEELS := build/wheels.stamp
RIG_WHEELS := build/rig-wheels.stamp
NODE_LOCKS := build/node-locks.stamp

# The downloads and installs of setup and setup-dev run side by side (most of their time is spent
# waiting on the registries): a minute less of a fresh `make test`. The two apt-get steps go first,
# one after the other, since dpkg takes one lock.
SETUP_JOBS ?= 4
setup: sandbox
	@$(MAKE) --no-print-directory -j$(SETUP_JOBS) $(VENV)/.installed $(NODE_STAMP)
setup-dev: sandbox browser
	@$(MAKE) --no-print-directory -j$(SETUP_JOBS) $(VENV)/.installed-dev $(NODE_STAMP) $(NPM_PREFETCH) \
	  $(NODE_LOCKS) $(ENV_WHEELS) $(RIG_WHEELS)

# `make setup` installs every harness CLI into harnesses/node; nothing make runs (demo, tests, bars)
# installs one on first use, which would need the npm registry (harnesses.cli.installs_on_first_use).
export RIG_INSTALL_HARNESSES := 0

# Playwright (a dev dependency) drives the system's chromium in tests/test_view.py; it must never
# fetch a browser build of its own.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1

# bubblewrap confines every agent (see `rig doctor`); without root or apt, rig runs agents
# unconfined and says so in every record.
sandbox:
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; }; }; } || \
	  echo "warning: bubblewrap not installed (apt-get install bubblewrap); agents will run unconfined" >&2

# Debian's chromium, headless, is the real browser tests/test_view.py opens rig view's pages in.
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; }; } || \
	  echo "warning: chromium not installed (apt-get install chromium); tests/test_view.py will fail" >&2

# The harness CLIs, at the exact versions of the lock file.
$(NODE_STAMP): harnesses/node/package-lock.json
	cd harnesses/node && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# tests/test_harness_versions.py runs another version of a CLI, which the rig installs with npm
# inside the tests' loopback-only network: npm finds it in its own cache, filled here.
$(NPM_PREFETCH): tests/data/npm-prefetch.txt
	rm -rf build/npm-prefetch && mkdir -p build/npm-prefetch
	cd build/npm-prefetch && npm install --no-audit --no-fund --loglevel=error --no-save $$(cat ../../tests/data/npm-prefetch.txt)
	rm -rf build/npm-prefetch
	touch $@

# The tests build node environments offline (tests/test_env_node.py, tests/test_runner_vitest.py):
# npm finds the packages of each test project's package-lock.json in its cache, pnpm those of its
# pnpm-lock.yaml in its store, yarn those of its yarn.lock in its own cache (a yarn 1 lockfile beside
# a fixture, yarn1.lock, too); all are filled here, by installing each lockfile once.
YARN_LOCKS := $(wildcard tests/data/*_pack/fixture/yarn.lock tests/data/*_pack/yarn1.lock)
$(NODE_LOCKS): $(wildcard tests/data/*_pack/fixture/package-lock.json tests/data/*_pack/fixture/pnpm-lock.yaml) $(YARN_LOCKS) $(NPM_PREFETCH)
	for lock in tests/data/*_pack/fixture/package-lock.json; do \
	  rm -rf build/node-prefetch && mkdir -p build/node-prefetch && \
	  cp "$$lock" "$$(dirname $$lock)/package.json" build/node-prefetch/ && \
	  (cd build/node-prefetch && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) || exit 1; \
	done
	for lock in tests/data/*_pack/fixture/pnpm-lock.yaml; do \
	  rm -rf build/node-prefetch && mkdir -p build/node-prefetch && \
	  cp "$$lock" "$$(dirname $$lock)/package.json" build/node-prefetch/ && \
	  (cd build/node-prefetch && npx --yes --prefer-offline pnpm@$$(sed -n 's/^pnpm@//p' ../../tests/data/npm-prefetch.txt) \
	    fetch --frozen-lockfile --reporter=silent) || exit 1; \
	done
	for lock in $(YARN_LOCKS); do \
	  fixture=$$(dirname $$lock); [ "$$(basename $$lock)" = yarn.lock ] || fixture=$$fixture/fixture; \
	  rm -rf build/node-prefetch && cp -r $$fixture build/node-prefetch && cp $$lock build/node-prefetch/yarn.lock && \
	  if grep -q '^__metadata:' $$lock; then \
	    yarn="@yarnpkg/cli-dist@$$(sed -n 's|^@yarnpkg/cli-dist@||p' tests/data/npm-prefetch.txt)" args="--immutable --mode=skip-build"; \
	  else \
	    yarn="yarn@$$(sed -n 's/^yarn@//p' tests/data/npm-prefetch.txt)" args="--frozen-lockfile --ignore-scripts"; \
	  fi && \
	  (cd build/node-prefetch && YARN_ENABLE_TELEMETRY=0 SKIP_YARN_COREPACK_CHECK=1 \
	    npx --yes --prefer-offline -p $$yarn yarn install $$args >/dev/null) || exit 1; \
	done
	rm -rf build/node-prefetch
	touch $@

# tests/test_env.py builds project environments inside the loopback-only network: uv installs them
# from this wheel folder (RIG_WHEELS, offline), filled here.
$(ENV_WHEELS): tests/data/env-wheels.txt | $(BIN)/python
	rm -rf build/wheels && mkdir -p build/wheels
	$(BIN)/python -m pip download --quiet --disable-pip-version-check --no-deps -d build/wheels -r tests/data/env-wheels.txt
	touch $@

# tests/test_wheel.py builds rig's own wheel and installs it into a fresh venv inside the
# loopback-only network: uv finds setuptools (the build) and every dependency in this folder.
$(RIG_WHEELS): pyproject.toml | $(BIN)/python
	rm -rf build/rig-wheels && mkdir -p build/rig-wheels
	$(BIN)/python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb")); \
	  print("\n".join(p["build-system"]["requires"] + p["project"]["dependencies"]))' > build/rig-requirements.txt
	$(BIN)/python -m pip download --quiet --disable-pip-version-check --only-binary=:all: -d build/rig-wheels \
	  -r build/rig-requirements.txt
	touch $@

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(VENV)/.installed $@

# Every red-team strategy through every real CLI (too long for `make test`): its table goes into
# docs/red-team.md.
redteam: setup-dev
	.ci/isolated $(BIN)/python tests/redteam_every_cli.py

bench: setup
	$(BIN)/python bench/bench_calibrate.py
	$(BIN)/python bench/bench_run_overhead.py
	$(BIN)/python bench/bench_workspace_files.py

clean:
	rm -rf $(VENV) build *.egg-info harnesses/node/node_modules
