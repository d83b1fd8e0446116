# The two commands of the README, plus their shared set-up.
#   make demo   the demo project with a worker (uses the local Redis when it answers)
#   make test   lint, types, docs and the test suite on every supported Python and Django
.PHONY: demo test venv clean chromium

# Find a working interpreter: PATH first, then pyenv's versions folder (pyenv's shims refuse a
# version that is not selected, so we look past them).
find_python = $(firstword $(foreach p,$(1) $(wildcard $(HOME)/.pyenv/versions/$(2)*/bin/$(1)),$(shell $(p) -c 'import sys; print(sys.executable)' 2>/dev/null)))
PYTHON312 := $(call find_python,python3.12,3.12)
PYTHON311 := $(call find_python,python3.11,3.11)
# nox looks interpreters up by name on PATH: put the real ones first.
export PATH := $(dir $(PYTHON312)):$(dir $(PYTHON311)):$(PATH)
VENV_PYTHON := $(or $(PYTHON312),python3)

# pip without its noise: errors only (-qq also hides WARNING lines), no "new release" nag, no
# progress bars, no "running as root" warning, never a prompt.
PIP := PIP_ROOT_USER_ACTION=ignore PIP_PROGRESS_BAR=off .venv/bin/python -m pip -qq \
	--disable-pip-version-check --no-input

.venv/bin/python:
	@echo "make: creating .venv with $(VENV_PYTHON)"
	@$(VENV_PYTHON) -m venv .venv
	@$(PIP) install --upgrade pip

# The demo needs the package's runtime dependencies only.
.venv/.demo: pyproject.toml | .venv/bin/python
	@echo "make: installing django-redis-jobs and its runtime dependencies into .venv"
	@$(PIP) install -e .
	@touch $@

# make test: the dev toolchain (pytest, mypy, ruff, sphinx, nox, playwright...).
.venv/.installed: pyproject.toml | .venv/bin/python
	@echo "make: installing django-redis-jobs with the dev toolchain into .venv"
	@$(PIP) install -e '.[dev]'
	@touch $@ .venv/.demo

venv: .venv/.installed

PORT ?= 8000
demo: .venv/.demo
	@.venv/bin/python -m testproject.demo $(PORT)

# The admin's browser test drives Debian's chromium (Playwright's own browser download is not
# used): install it when it is missing.
chromium:
	@test -x /usr/bin/chromium || { echo "installing chromium for the admin's browser test"; \
		apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

test: venv chromium
	@test -n "$(PYTHON312)" || { echo "python3.12 not found (needed for Django 6)"; exit 1; }
	@test -n "$(PYTHON311)" || { echo "python3.11 not found (needed for the Django 5.2 leg)"; exit 1; }
	UV_PYTHON_DOWNLOADS=never .venv/bin/nox --default-venv-backend uv $(NOXARGS)

clean:
	rm -rf .venv .nox docs/_build dist build
