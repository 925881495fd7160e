# Two commands: `make demo` runs the portal on embedded defaults; `make test` runs the whole suite.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
PORT ?= 8000
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/portal
TEST_REDIS_URL ?= redis://127.0.0.1:6379/0
# The suite runs in this many processes (pytest-xdist; each has its own test database and Redis database).
PYTEST_WORKERS ?= 2

.PHONY: demo test install install-dev system-deps lint bench chaos secrets env clean

$(VENV)/.installed: requirements.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "$(PYTHON) not found; set PYTHON=/path/to/python3.11"; exit 1; }
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -r requirements.txt
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt
	$(PIP) install --quiet -r requirements-dev.txt
	touch $@

# The Python client and the `gpuportal` command (client/, a package of its own), reinstalled when it changes.
$(VENV)/.installed-client: $(VENV)/.installed client/pyproject.toml $(wildcard client/gpuportal/*.py)
	$(PIP) install --quiet ./client
	touch $@

install: $(VENV)/.installed $(VENV)/.installed-client
install-dev: $(VENV)/.installed-dev $(VENV)/.installed-client

# Debian packages the test suite runs for real (listed in apt-packages.txt), installed when missing.
system-deps:
	@missing=$$(for p in $$(grep -v '^#' apt-packages.txt); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

demo: install
	DEBUG=1 $(PY) manage.py migrate --noinput
	DEBUG=1 $(PY) manage.py seed_demo
	DEBUG=1 $(PY) manage.py rundemo --port $(PORT)

test: install-dev system-deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} REDIS_URL=$${REDIS_URL:-$(TEST_REDIS_URL)} \
		$(VENV)/bin/pytest -p no:cacheprovider -n $(PYTEST_WORKERS) --dist load $(PYTEST_ARGS)

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The chaos run (bench/chaos.py): its own PostgreSQL and Redis, 4 workers, 2,000 jobs, kill -9, Redis
# and PostgreSQL restarts, then every job, quota and GPU-second accounted for (about 2 minutes).
chaos: install-dev system-deps
	$(PY) bench/chaos.py

# New secrets as KEY=value lines (for .env, or the gpu-portal Secret of deploy/).
secrets:
	@$(PYTHON) -c 'import secrets; print("SECRET_KEY=" + secrets.token_urlsafe(50)); print("METRICS_TOKEN=" + secrets.token_urlsafe(32))'

# A .env for docker compose with freshly generated secrets (never overwrites an existing one).
env:
	@test ! -e .env || { echo ".env exists; delete it first to generate new secrets"; exit 1; }
	@{ grep -v -e '^SECRET_KEY=' -e '^METRICS_TOKEN=' .env.example; $(MAKE) -s secrets; } > .env
	@echo "wrote .env with a new SECRET_KEY and METRICS_TOKEN"

clean:
	rm -rf $(VENV) db.sqlite3 staticfiles client/build client/*.egg-info
