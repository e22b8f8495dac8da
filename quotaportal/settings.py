"""quotaportal settings: every value comes from the environment (see .env.example).

Defaults are the embedded set-up, which needs no server: SQLite and Celery's filesystem transport under var/.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from quotaportal.env import envbool, envint, envlevel, envlist, envname, envrate, envstr, envurl

BASE_DIR = Path(__file__).resolve().parent.parent
# Durations have maxima: a number of seconds or days the process would add to today's date must not take it
# past the year 9999, or the pass, the pruning or the sign-in that computes that date fails, long after start.
_A_YEAR = 365 * 86_400
_A_CENTURY_IN_DAYS = 36_500
VAR_DIR = Path(envstr("QUOTAPORTAL_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = envbool("DEBUG", False)
_INSECURE_KEY = "insecure-development-key-change-me"
SECRET_KEY = envstr("SECRET_KEY", _INSECURE_KEY if DEBUG else "")
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off (or set DEBUG=1 for development)")
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", []) if envstr("CSRF_TRUSTED_ORIGINS", "") else []

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "csp",
    "axes",
    "scheduling",
    "whatif",
    "portal",
    "api",
    "awsapi",
    "ops",
    "notifications",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as axes asks: it turns a sign-in its backend refused into the lockout response.
    "axes.middleware.AxesMiddleware",
]

# --- security -------------------------------------------------------------------------------------------
# HTTPS=1 says the site is served over HTTPS (directly or behind a proxy that sets X-Forwarded-Proto): it
# turns on the redirect, secure cookies and HSTS together, which is what `check --deploy` asks for.
HTTPS = envbool("HTTPS", False)
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", HTTPS)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = envint(
    "SECURE_HSTS_SECONDS", 31_536_000 if HTTPS else 0, minimum=0, maximum=10 * _A_YEAR
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", HTTPS)
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", HTTPS)
BEHIND_PROXY = envbool("BEHIND_PROXY", False)
if BEHIND_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
# Scripts and styles come from our own static files only; htmx needs no eval (no trigger filters, no hx-on)
# and its indicator styles are off (meta htmx-config), so nothing inline runs. Style attributes (bar widths)
# are allowed, style elements are not.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": [SELF, "data:"],
        "font-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}

ROOT_URLCONF = "quotaportal.urls"
WSGI_APPLICATION = "quotaportal.wsgi.application"
ASGI_APPLICATION = "quotaportal.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_URL = envurl(
    "DATABASE_URL",
    f"sqlite:///{VAR_DIR / 'quotaportal.sqlite3'}",
    schemes=("sqlite", "postgres", "postgresql", "pgsql"),
)
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL, conn_max_age=envint("DB_CONN_MAX_AGE", 60, minimum=0, maximum=86_400)
    )
}
if not DATABASES["default"]["NAME"]:
    raise ImproperlyConfigured("DATABASE_URL names no database: write postgres://USER@HOST:PORT/NAME")
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A worker, beat and the web server share one SQLite file: wait for the write lock instead of failing.
    # A page cache of up to 64 MiB per connection (SQLite's default is 2 MiB, less than a pass over a queue of
    # 12,000 jobs touches: its updates then read the job table's pages and indexes again from the file).
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA cache_size=-65536",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
else:
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
    # Not a check: its password_changed hook deletes the user's API token when the password is set.
    {"NAME": "quotaportal.accounts.ApiTokensRevokedOnPasswordChange"},
]
# axes first: it refuses a locked-out account before any backend checks the password.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

# --- Celery ---------------------------------------------------------------------------------------------
CELERY_BROKER_URL = envurl(
    "CELERY_BROKER_URL",
    "filesystem://",
    schemes=("filesystem", "redis", "rediss", "amqp", "memory"),
)
CELERY_BROKER_TRANSPORT_OPTIONS = {}
if CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_TRANSPORT = "quotaportal.broker:Transport"
    _broker_dir = VAR_DIR / "broker"
    try:
        for _folder in ("out", "processed", "control"):
            (_broker_dir / _folder).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ImproperlyConfigured(
            f"QUOTAPORTAL_VAR_DIR={str(VAR_DIR)!r}: cannot create the broker's folders in it ({exc.strerror})"
        ) from None
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "out"),
        "data_folder_out": str(_broker_dir / "out"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    # A Redis host that does not answer must not hold a web request until TCP gives up.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 2}
# Publishing to a broker that is down gives up within about a second; the request that asked for a pass still
# succeeds (`scheduling.passes.requests.pass_request` logs the failure) and the beat runs the pass once the
# broker is back.
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 2,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", False)
# CELERY_QUEUE: the broker queue the web processes, workers and beat of one deployment share. Two deployments
# (or test runs) on one Redis database must name different queues, or each worker takes the other's passes.
CELERY_TASK_DEFAULT_QUEUE = envname("CELERY_QUEUE", "celery")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# --- quotaportal ----------------------------------------------------------------------------------------
QUOTAPORTAL_AUTOPASS = envbool("QUOTAPORTAL_AUTOPASS", True)
PLAN_DRAIN_SECONDS = envint("PLAN_DRAIN_SECONDS", 1800, minimum=0, maximum=_A_YEAR)
# At most this many running jobs a pass move to an earlier entry of their list (docs/relocation.md); 0 = none.
MAX_RELOCATIONS_PER_PASS = envint("MAX_RELOCATIONS_PER_PASS", 4, minimum=0, maximum=1000)
PASS_INTERVAL_SECONDS = envint("PASS_INTERVAL_SECONDS", 5, minimum=1, maximum=3600)
# Estimated start times (behaviour.md#why-pending-and-when-it-will-start): at most one estimate run per queue this
# often, after passes that changed something; each run stops after ESTIMATE_TIME_LIMIT_SECONDS (jobs it did not reach
# get "not before")
ESTIMATE_INTERVAL_SECONDS = envint("ESTIMATE_INTERVAL_SECONDS", 30, minimum=1, maximum=86_400)
ESTIMATE_TIME_LIMIT_SECONDS = envint("ESTIMATE_TIME_LIMIT_SECONDS", 20, minimum=1, maximum=600)
# The submit form's "if submitted now" estimate is cut off after this many seconds
ESTIMATE_WHATIF_SECONDS = envint("ESTIMATE_WHATIF_SECONDS", 2, minimum=1, maximum=60)
SIMULATED_STARTUP_SECONDS = envint("SIMULATED_STARTUP_SECONDS", 5, minimum=0, maximum=86_400)
# How long the simulated executor takes to stop a STOPPING job (a checkpoint and exit), so demos show STOPPING.
SIMULATED_STOP_SECONDS = envint("SIMULATED_STOP_SECONDS", 3, minimum=0, maximum=86_400)
# A long-polling executor (GET .../work/?wait=N) rereads the database at least this often, even when no
# change was signalled through the cache (a lost signal costs at most this much latency).
WORK_RECHECK_SECONDS = envint("WORK_RECHECK_SECONDS", 5, minimum=1, maximum=30)
# A job not started in time (START_TIMEOUT) waits this long before its next placement, doubling after each
# timeout up to the maximum (1, 2, 4 ... 60 minutes by default).
START_BACKOFF_BASE_SECONDS = envint("START_BACKOFF_BASE_SECONDS", 60, minimum=1, maximum=86_400)
START_BACKOFF_MAX_SECONDS = envint("START_BACKOFF_MAX_SECONDS", 3600, minimum=1, maximum=86_400)
# Where seed_demo writes the token of the demo's agent (the Procfile's `agent` reads it with --token-file).
DEMO_AGENT_TOKEN_FILE = VAR_DIR / "agent-token"
# Utilization samples for the charts: at most one per queue per interval, kept for HISTORY_DAYS.
SAMPLE_INTERVAL_SECONDS = envint("SAMPLE_INTERVAL_SECONDS", 30, minimum=1, maximum=86_400)
HISTORY_DAYS = envint("HISTORY_DAYS", 8, minimum=1, maximum=_A_CENTURY_IN_DAYS)
# The beat sends a heartbeat task this often and a worker records running it; the overview warns that the beat
# or the workers are silent once the last heartbeat of either is older than HEARTBEAT_SILENT_SECONDS.
HEARTBEAT_SECONDS = envint("HEARTBEAT_SECONDS", 10, minimum=1, maximum=3600)
HEARTBEAT_SILENT_SECONDS = envint("HEARTBEAT_SILENT_SECONDS", 60, minimum=2, maximum=86_400)
# Events older than this are deleted by the beat, except configuration changes (the audit log, kept for good)
# and the events of jobs not yet finished; 0 keeps every event.
EVENT_RETENTION_DAYS = envint("EVENT_RETENTION_DAYS", 90, minimum=0, maximum=_A_CENTURY_IN_DAYS)
# The Microsoft Philly trace (philly.csv, with philly_vc.csv beside it) for `replay` and the what-if page; a
# relative path is taken from the project's folder, so the default is the shared traces folder beside it.
REPLAY_TRACE = os.path.normpath(BASE_DIR / envstr("REPLAY_TRACE", "../shared/traces/philly.csv"))
# A what-if run (two replays) that takes longer than this is stopped and marked FAILED.
WHATIF_TIME_LIMIT_SECONDS = envint("WHATIF_TIME_LIMIT_SECONDS", 900, minimum=10, maximum=86_400)
# When set, /metrics answers only requests with `Authorization: Bearer <METRICS_TOKEN>`.
METRICS_TOKEN = envstr("METRICS_TOKEN", "")

# --- notifications ---------------------------------------------------------------------------------------
# The beat reads new events, starved shares and silent executors this often and enqueues deliveries.
NOTIFY_SCAN_SECONDS = envint("NOTIFY_SCAN_SECONDS", 15, minimum=1, maximum=3600)
# At most this many events are read per scan (the next scan goes on from where it stopped).
NOTIFY_SCAN_BATCH = envint("NOTIFY_SCAN_BATCH", 1000, minimum=1, maximum=100_000)
# ... and it stops at the event that makes this many deliveries (a storm is read over several scans).
NOTIFY_SCAN_MAX_DELIVERIES = envint("NOTIFY_SCAN_MAX_DELIVERIES", 20_000, minimum=1, maximum=1_000_000)
# A delivery is tried this many times in all (waits 30 s, 2, 8, 32 min... between tries) before it is FAILED.
NOTIFY_MAX_ATTEMPTS = envint("NOTIFY_MAX_ATTEMPTS", 5, minimum=1, maximum=20)
NOTIFY_TIMEOUT_SECONDS = envint("NOTIFY_TIMEOUT_SECONDS", 10, minimum=1, maximum=120)
# Webhooks to loopback, private and link-local addresses are refused unless this is on (a webhook is a request
# the server makes for a user: by default it may not reach what only the server can reach).
NOTIFY_ALLOW_PRIVATE_WEBHOOKS = envbool("NOTIFY_ALLOW_PRIVATE_WEBHOOKS", False)
# An executor last seen longer ago than this is taken as retired, no longer as silent.
NOTIFY_EXECUTOR_RETIRED_HOURS = envint("NOTIFY_EXECUTOR_RETIRED_HOURS", 24, minimum=1, maximum=24 * 365)
# Delivery logs are kept this many days.
NOTIFY_LOG_DAYS = envint("NOTIFY_LOG_DAYS", 30, minimum=1, maximum=_A_CENTURY_IN_DAYS)
# Links in notifications start with this (the portal's address as its users reach it).
PORTAL_URL = envurl("PORTAL_URL", "http://127.0.0.1:8000", schemes=("http", "https")).rstrip("/")
# Email through Django's mail settings (console: written to the worker's log).
EMAIL_BACKEND = envstr("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = envstr("EMAIL_HOST", "localhost")
EMAIL_PORT = envint("EMAIL_PORT", 25, minimum=1, maximum=65535)
EMAIL_HOST_USER = envstr("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = envstr("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = envbool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = envint("EMAIL_TIMEOUT", 10, minimum=1, maximum=120)
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "quotaportal@localhost")

# --- cache: throttle counters shared by every web process --------------------------------------------------
# CACHE_URL: redis://host:6379/N, file:///absolute/dir or locmem:// (one process only). Unset: the broker's
# Redis when CELERY_BROKER_URL is Redis, else files under var/cache (shared by the processes of one machine).
_default_cache = (
    CELERY_BROKER_URL
    if CELERY_BROKER_URL.startswith(("redis://", "rediss://"))
    else (f"file://{VAR_DIR / 'cache'}")
)
CACHE_URL = (
    envurl("CACHE_URL", _default_cache, schemes=("redis", "rediss", "file", "locmem"))
    if envstr("CACHE_URL", "").strip()
    else _default_cache
)
# CACHE_KEY_PREFIX: as CELERY_QUEUE, what keeps two deployments on one cache apart (a pass request waiting for
# one's queue must not silence another's queue with the same id).
CACHE_KEY_PREFIX = envname("CACHE_KEY_PREFIX", "quotaportal")
if CACHE_URL.startswith(("redis://", "rediss://")):
    # Short timeouts: a Redis outage makes the throttles fail open quickly instead of hanging requests.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": CACHE_URL,
            "KEY_PREFIX": CACHE_KEY_PREFIX,
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
elif CACHE_URL.startswith("file://"):
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": CACHE_URL.removeprefix("file://"),
            "KEY_PREFIX": CACHE_KEY_PREFIX,
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
# A pass request made while one for the same queue waits in the broker joins it; the mark lasts at most this
# long. 0 turns joining off; it is off by default with a one-process cache, which workers cannot clear.
PASS_COALESCE_SECONDS = envint(
    "PASS_COALESCE_SECONDS", 0 if CACHE_URL.startswith("locmem") else 120, minimum=0, maximum=3600
)
# The beat gives a pass only to queues that changed or have something due (scheduling.passes.due); a queue
# in which nothing happens still gets one at least this often. 0 passes every queue on every beat, the
# default with a one-process cache, which the beat cannot read.
PASS_SETTLED_SECONDS = envint(
    "PASS_SETTLED_SECONDS", 0 if CACHE_URL.startswith("locmem") else 3600, minimum=0, maximum=86400
)

# --- request limits -------------------------------------------------------------------------------------
# Request bodies above this many bytes are refused (413 on the API); a job's payload is at most 64 KiB.
DATA_UPLOAD_MAX_MEMORY_SIZE = envint("DATA_UPLOAD_MAX_MEMORY_SIZE", 1_048_576, minimum=131_072)
# Job submissions per user through the API (N/second, N/min, N/hour, N/day; `off` for none): 429 above it.
API_SUBMIT_RATE = envrate("API_SUBMIT_RATE", "600/min")
# Sign-in (django-axes, configured in quotaportal.accounts): after LOGIN_FAILURE_LIMIT failed attempts for one
# username, however it is spelt (or 10 times as many from one address), sign-in is refused with 429 until
# LOGIN_LOCKOUT_SECONDS have passed since the last attempt. Failures are counted in the database.
LOGIN_FAILURE_LIMIT = envint("LOGIN_FAILURE_LIMIT", 5, minimum=1)
LOGIN_LOCKOUT_SECONDS = envint("LOGIN_LOCKOUT_SECONDS", 900, minimum=1, maximum=_A_YEAR)
AXES_HANDLER = "quotaportal.accounts.LockoutHandler"
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_FAILURE_LIMIT = "quotaportal.accounts.failure_limit"
AXES_COOLOFF_TIME = "quotaportal.accounts.lockout_time"
AXES_USERNAME_CALLABLE = "quotaportal.accounts.lockout_username"
AXES_CLIENT_IP_CALLABLE = "quotaportal.accounts.client_address"
AXES_LOCKOUT_CALLABLE = "quotaportal.accounts.lockout_response"
AXES_RESET_ON_SUCCESS = True
# Lockouts, not a log of every sign-in: successful sign-ins would otherwise add a row each, kept for ever.
AXES_DISABLE_ACCESS_LOG = True
AXES_VERBOSE = False  # no start-up banner on every manage.py command

# --- the AWS-compatible API (awsapi) ---------------------------------------------------------------------
# Access keys' secrets are kept encrypted with a key derived from this (unset: from SECRET_KEY; changing it
# makes the existing keys unusable, so set it once, apart from SECRET_KEY, to rotate SECRET_KEY freely).
ACCESS_KEY_ENCRYPTION_KEY = envstr("ACCESS_KEY_ENCRYPTION_KEY", "")
# The region and 12-digit account in the ARNs the AWS API answers with (any region is accepted in requests).
AWS_REGION = envstr("QUOTAPORTAL_AWS_REGION", "us-east-1")
AWS_ACCOUNT_ID = envstr("QUOTAPORTAL_AWS_ACCOUNT_ID", "000000000000")
if not (len(AWS_ACCOUNT_ID) == 12 and AWS_ACCOUNT_ID.isdigit()):
    raise ImproperlyConfigured("QUOTAPORTAL_AWS_ACCOUNT_ID must be 12 digits (the SageMaker SDK parses ARNs)")
# A signed request whose X-Amz-Date is further than this from the server's clock is refused.
AWS_MAX_SKEW_SECONDS = envint("QUOTAPORTAL_AWS_MAX_SKEW_SECONDS", 900, minimum=1, maximum=86400)
# The executor of environments created through the AWS API without a `quotaportal:executor` tag.
AWS_DEFAULT_EXECUTOR = envstr("QUOTAPORTAL_AWS_DEFAULT_EXECUTOR", "external")
if AWS_DEFAULT_EXECUTOR not in ("external", "simulated"):
    raise ImproperlyConfigured("QUOTAPORTAL_AWS_DEFAULT_EXECUTOR must be external or simulated")

# --- REST framework -------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "api.pagination.PageNumbers",
    "PAGE_SIZE": envint("API_PAGE_SIZE", 50, minimum=1, maximum=1000),
    # Every view declares its errors (api.schema), the access keys of awsapi included.
    "DEFAULT_SCHEMA_CLASS": "api.schema.ApiAutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    # JSON nested deeper than the parser allows is a 400, not a RecursionError.
    "DEFAULT_PARSER_CLASSES": [
        "api.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    # Job submission is throttled per user (API_SUBMIT_RATE) by api.throttling, in CACHES.
    "EXCEPTION_HANDLER": "api.exceptions.api_exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "quotaportal API",
    "DESCRIPTION": (
        "Share a pool of GPU instances between teams through quota shares.\n\n"
        "The same portal also serves AWS Batch's quota-management and service-job API at "
        "[/aws/batch](/aws/batch/v1/describejobqueues): point boto3, the AWS CLI or the SageMaker SDK at it "
        "(`endpoint_url=<portal>/aws/batch` or `AWS_ENDPOINT_URL_BATCH`) with an access key from "
        "[your access keys](/profile/access-keys/) (or `/api/v1/access-keys/`). What it supports, field by "
        "field: docs/aws-api.md."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # The docs page's JavaScript comes from drf-spectacular-sidecar's static files, not a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "api.schema.request_bodies_refuse_unknown_fields",
        "api.schema.empty_filters_mean_no_filter",
    ],
    "ENUM_NAME_OVERRIDES": {
        "JobStatusEnum": "scheduling.models.JobStatus",
        "ReportedJobStatusEnum": "scheduling.services.executor.REPORTABLE_STATUSES",
        "TrainingPlanStatusEnum": "scheduling.models.TrainingPlan.Status",
        "TaskStateEnum": "scheduling.models.TaskState",
        "StateEnum": "scheduling.models.State",
    },
}

# LOG_FORMAT=json writes one JSON object a line, with the queue, share and job of scheduling decisions as fields.
LOG_FORMAT = envstr("LOG_FORMAT", "plain")
if LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT={LOG_FORMAT!r} is not one of plain, json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
            "timestamp": True,
        },
    },
    "filters": {"refusals_without_traceback": {"()": "quotaportal.logfilters.RefusalsWithoutTraceback"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": envlevel("LOG_LEVEL", "INFO")},
    "loggers": {
        # Django's default config gives `django` a console handler of its own (when DEBUG) and lets it propagate
        # to the root's too: every record printed twice. No handler of its own: the root's prints it once.
        "django": {"handlers": [], "level": "INFO", "propagate": True},
        "django.request": {"filters": ["refusals_without_traceback"]},
        "django.db.backends": {"level": "WARNING"},
    },
}

CELERY_BEAT_SCHEDULE = {
    "scheduling-passes": {
        "task": "scheduling.tasks.run_all_passes",
        "schedule": float(PASS_INTERVAL_SECONDS),
    },
    "simulated-executor": {"task": "scheduling.tasks.simulated_executor_tick", "schedule": 2.0},
    # Dropped unrun once the next is due: with no worker, the broker does not fill with heartbeats.
    "heartbeat": {
        "task": "scheduling.tasks.heartbeat",
        "schedule": float(HEARTBEAT_SECONDS),
        "options": {"expires": float(HEARTBEAT_SECONDS)},
    },
    "prune-history": {"task": "scheduling.tasks.prune_history", "schedule": 3600.0},
    "prune-events": {"task": "scheduling.tasks.prune_events", "schedule": 3600.0},
    "notifications-scan": {"task": "notifications.tasks.scan", "schedule": float(NOTIFY_SCAN_SECONDS)},
    "notifications-prune": {"task": "notifications.tasks.prune", "schedule": 3600.0},
}

# --- pages ----------------------------------------------------------------------------------------------
# How often the live parts of the pages (overview, share, job, event tail) ask for fresh numbers.
PAGE_REFRESH_SECONDS = envint("PAGE_REFRESH_SECONDS", 5, minimum=1, maximum=3600)
# Rows per page of the job list and the event log.
PAGE_LIST_SIZE = envint("PAGE_LIST_SIZE", 50, minimum=1, maximum=1000)
# A share whose oldest pending job has waited this long is marked starved on the overview.
PAGE_STARVED_AFTER_SECONDS = envint("PAGE_STARVED_AFTER_SECONDS", 900, minimum=1, maximum=_A_YEAR)
