"""Django settings. Everything is configured through environment variables (see README, Configuration).

Embedded defaults need nothing installed: SQLite, the simulated cluster, Celery tasks run eagerly
in-process. Set DATABASE_URL / REDIS_URL / CLUSTER_BACKEND for the full stack.
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url

from portal.env import env_bool, env_choice, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)
# The development default carries Django's "django-insecure-" prefix, so `manage.py check --deploy`
# flags it; docker-compose refuses to start without a real SECRET_KEY.
SECRET_KEY = env_str("SECRET_KEY", "") or "django-insecure-gpu-portal-development-key-change-me"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

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
    "portal.tenants",
    "portal.jobs",
    "scheduling",
    "billing",
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
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

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
                "portal.pages.context.portal_context",
                "billing.context.budget_alerts",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}")
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 0))}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The demo runs the scheduler loop in a thread beside the web server: IMMEDIATE transactions and
    # a busy timeout make SQLite serialize writers instead of failing with "database is locked".
    DATABASES["default"]["OPTIONS"] = {"timeout": 30, "transaction_mode": "IMMEDIATE"}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "job-list"
LOGOUT_REDIRECT_URL = "login"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "portal.api.pagination.Pagination",
    "PAGE_SIZE": env_int("API_PAGE_SIZE", 50),
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "portal.api.errors.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU job portal API",
    "DESCRIPTION": "Submit and follow GPU jobs; read queues, usage and cost.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Celery ------------------------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL", "")
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
# Without Redis the tasks run in-process (eagerly); with Redis a real worker and beat run them.
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", not REDIS_URL)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_QUEUE", "portal")
SCHEDULER_INTERVAL_S = env_float("SCHEDULER_INTERVAL_S", 10.0)
METERING_INTERVAL_S = env_float("METERING_INTERVAL_S", 60.0)
CELERY_BEAT_SCHEDULE = {
    "scheduling-cycle": {
        "task": "scheduling.tasks.scheduling_cycle",
        "schedule": SCHEDULER_INTERVAL_S,
        "kwargs": {"periodic": True},  # deduplicated per interval (scheduling.services.periodic_claim)
    },
    "metering": {"task": "billing.tasks.metering_run", "schedule": METERING_INTERVAL_S},
}

# --- Scheduling --------------------------------------------------------------------------------
CLUSTER_BACKEND = env_choice("CLUSTER_BACKEND", "simulated", {"simulated", "kubernetes"})
# Simulated cluster: a job "runs" for runtime / SIM_SPEEDUP wall seconds.
SIM_SPEEDUP = env_float("SIM_SPEEDUP", 60.0)
PLACEMENT_POLICY = env_str("PLACEMENT_POLICY", "binpack")
SCHEDULER_SEED = env_int("SCHEDULER_SEED", 0)
# Node label whose value (on-demand, spot, reserved) prices the GPU-hours of jobs on that node.
CAPACITY_TYPE_LABEL = env_str("CAPACITY_TYPE_LABEL", "karpenter.sh/capacity-type")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.server": {"level": "WARNING"}, "celery.app.trace": {"level": "WARNING"}},
}

# --- Kubernetes backend and control loop (scheduling/adapters/kubernetes.py, docs/kubernetes.md) ---
# CLUSTER_BACKEND=kubernetes reads KUBECONFIG (first file of the list), else the in-cluster config.
KUBECONFIG = env_str("KUBECONFIG", "")
K8S_CONTEXT = env_str("K8S_CONTEXT", "")  # kubeconfig context; empty = the current one
K8S_SCHEDULER_NAME = env_str("K8S_SCHEDULER_NAME", "gpu-portal")  # schedulerName of the portal's pods
K8S_RACK_LABEL = env_str("K8S_RACK_LABEL", "topology.kubernetes.io/rack")
K8S_TIMEOUT_S = env_float("K8S_TIMEOUT_S", 10.0)  # connect and read timeout of every API call
K8S_WATCH_TIMEOUT_S = env_int("K8S_WATCH_TIMEOUT_S", 60)  # one watch's length before it resumes
K8S_SYNC_TIMEOUT_S = env_float("K8S_SYNC_TIMEOUT_S", 10.0)  # wait for the caches before a cycle
K8S_API_RETRIES = env_int("K8S_API_RETRIES", 3)  # attempts per call on 5xx/429/timeouts
K8S_API_BACKOFF_S = env_float("K8S_API_BACKOFF_S", 0.2)  # first retry delay, doubling
K8S_POD_GRACE_S = env_int("K8S_POD_GRACE_S", 30)  # grace period when preempting or cancelling
K8S_RUN_AS_USER = env_int("K8S_RUN_AS_USER", 1000)  # uid/gid of every pod (restricted PSS: non-root)
# An admitted job whose pods are not running after this long is requeued by the sweeper.
ADMITTED_TIMEOUT_S = env_float("ADMITTED_TIMEOUT_S", 600.0)
CLUSTER_SYNC_INTERVAL_S = env_float("CLUSTER_SYNC_INTERVAL_S", 15.0)
SWEEP_INTERVAL_S = env_float("SWEEP_INTERVAL_S", 60.0)
# A task whose worker died unacknowledged is redelivered after this long (Redis visibility timeout).
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT_S", 300)}
CELERY_BEAT_SCHEDULE["cluster-sync"] = {
    "task": "scheduling.tasks.cluster_sync",
    "schedule": CLUSTER_SYNC_INTERVAL_S,
    "kwargs": {"periodic": True},
}
CELERY_BEAT_SCHEDULE["sweeper"] = {
    "task": "scheduling.tasks.sweep",
    "schedule": SWEEP_INTERVAL_S,
    "kwargs": {"periodic": True},
}
# /metrics: empty token = open (scrape inside the cluster); admission waits counted over this window.
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
METRICS_WAIT_WINDOW_S = env_float("METRICS_WAIT_WINDOW_S", 86400.0)

# --- Billing (issue 6: cost allocation, efficiency, budgets) -------------------------------------
# Prometheus with the DCGM exporter's series; empty = utilization from the simulated cluster.
PROMETHEUS_URL = env_str("PROMETHEUS_URL", "")
PROMETHEUS_TIMEOUT_S = env_float("PROMETHEUS_TIMEOUT_S", 5.0)
# Which DCGM `pod` label values belong to a job ({job_id} is replaced by the job's id).
BILLING_POD_REGEX = env_str("BILLING_POD_REGEX", "job-{job_id}-.*")
CAPACITY_SNAPSHOT_INTERVAL_S = env_float("CAPACITY_SNAPSHOT_INTERVAL_S", 300.0)
BUDGET_CHECK_INTERVAL_S = env_float("BUDGET_CHECK_INTERVAL_S", 300.0)
# Budget alert mail goes through Django's mail; the console backend prints it.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "gpu-portal@localhost")
CELERY_BEAT_SCHEDULE.update(
    {
        "capacity-snapshot": {"task": "billing.tasks.capacity_record", "schedule": CAPACITY_SNAPSHOT_INTERVAL_S},
        "budget-check": {"task": "billing.tasks.budget_check", "schedule": BUDGET_CHECK_INTERVAL_S},
    }
)
