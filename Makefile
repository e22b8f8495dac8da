# quotaportal: `make run` (set up, seed the demo, start web + worker + beat + the agent), `make lint` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum requirements.txt | cut -d' ' -f1)
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install run migrate seed test test-torch lint bench bench-events clean sdk-venv test-sdk

$(STAMP): requirements.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

install: $(STAMP)

migrate: install
	@mkdir -p var
	DEBUG=$${DEBUG:-1} $(BIN)/python manage.py migrate --noinput

seed: migrate
	DEBUG=$${DEBUG:-1} $(BIN)/python manage.py seed_demo

run: seed
	@echo ""
	@echo "  quotaportal is starting at http://$(HOST):$(PORT)/"
	@echo "  sign in as admin / quotaportal-admin (staff), or ana / quotaportal-demo (a member of teams NLP and Research)"
	@echo "  environment local: the agent runs real processes (agent/examples/train.py) in var/agent/jobs/"
	@echo "  Ctrl-C stops the web server, the Celery worker, beat and the agent together."
	@echo ""
	@# Ctrl-C is how it ends, and no error: the recipe's shell outlives the signal (`trap :`) while honcho stops
	@# everything and exits 130, which the shell takes for success.
	trap : INT; PATH="$(CURDIR)/$(BIN):$$PATH" DEBUG=$${DEBUG:-1} QUOTAPORTAL_HOST=$(HOST) QUOTAPORTAL_PORT=$(PORT) \
		$(BIN)/honcho start -f Procfile || test $$? -eq 130

# One style and the arrows between the packages (pyproject.toml): every check runs, then any failure fails.
lint: install
	@status=0; \
	$(BIN)/ruff check . || status=1; \
	$(BIN)/ruff format --check . || status=1; \
	$(BIN)/lint-imports || status=1; \
	exit $$status

test: lint
	@mkdir -p var
	SECRET_KEY=$${SECRET_KEY:-test-only-secret-key} $(BIN)/python -m pytest $(PYTEST_ARGS)

# The SageMaker SDK is heavy and declares far more than TrainingQueue imports: it lives in its own virtualenv
# (requirements-sdk.txt, installed without its declared dependencies), and its test drives it as a subprocess.
SDK_VENV := .venv-sdk
SDK_STAMP := $(SDK_VENV)/.installed-$(shell cksum requirements-sdk.txt | cut -d' ' -f1)

$(SDK_STAMP): requirements-sdk.txt
	@test -x $(SDK_VENV)/bin/python || $(PYTHON) -m venv $(SDK_VENV)
	$(SDK_VENV)/bin/python -m pip install --quiet --no-deps -r requirements-sdk.txt
	@rm -f $(SDK_VENV)/.installed-*
	@touch $(SDK_STAMP)

sdk-venv: $(SDK_STAMP)

test-sdk: install sdk-venv
	@mkdir -p var
	QUOTAPORTAL_REQUIRE_SDK=1 SECRET_KEY=$${SECRET_KEY:-test-only-secret-key} $(BIN)/python -m pytest tests/awsapi/test_sagemaker_sdk.py

# A real torch.distributed job (gloo, CPU) across two agents, on PostgreSQL and Redis (DATABASE_URL,
# CELERY_BROKER_URL): torch (requirements-torch.txt, a CPU build) goes into a virtualenv of its own,
# var/torch-venv, which only the jobs' processes use.
TORCH_VENV := var/torch-venv
TORCH_STAMP := $(TORCH_VENV)/.installed-$(shell cksum requirements-torch.txt | cut -d' ' -f1)

$(TORCH_STAMP): requirements-torch.txt
	@mkdir -p var
	@test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install --quiet -r requirements-torch.txt
	@rm -f $(TORCH_VENV)/.installed-*
	@touch $(TORCH_STAMP)

test-torch: install $(TORCH_STAMP)
	SECRET_KEY=$${SECRET_KEY:-test-only-secret-key} TORCH_PYTHON=$(CURDIR)/$(TORCH_VENV)/bin/python \
	QUOTAPORTAL_REQUIRE_TORCH=1 $(BIN)/python -m pytest tests/ops/test_torch_end_to_end.py $(PYTEST_ARGS)

# The benchmark writes and deletes rows of its own: on a scratch database (var/bench.sqlite3 unless
# DATABASE_URL names one whose name says test, scratch, soak or bench).
bench: install
	@mkdir -p var
	export DATABASE_URL=$${DATABASE_URL:-sqlite:///$(CURDIR)/var/bench.sqlite3} DEBUG=$${DEBUG:-1}; \
	$(BIN)/python manage.py migrate --noinput && $(BIN)/python -m tools.bench_pass

# The event list at 2,000,000 events (BENCH_ARGS="--events 200000" for a quicker look), on a scratch database too.
bench-events: install
	@mkdir -p var
	export DATABASE_URL=$${DATABASE_URL:-sqlite:///$(CURDIR)/var/bench.sqlite3} DEBUG=$${DEBUG:-1}; \
	$(BIN)/python manage.py migrate --noinput && $(BIN)/python -m tools.bench_events $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(SDK_VENV) var .pytest_cache .hypothesis .ruff_cache .import_linter_cache
