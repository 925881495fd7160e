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
SECRET_KEY = env_str("SECRET_KEY", "insecure-dev-key-change-me" if DEBUG else "")
if not SECRET_KEY:
    # Only a development default when DEBUG is on; production must configure a real key.
    SECRET_KEY = "insecure-dev-key-change-me"
    if not env_bool("ALLOW_INSECURE_SECRET_KEY", True):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured("SECRET_KEY must be set")
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
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
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
    "scheduling-cycle": {"task": "scheduling.tasks.scheduling_cycle", "schedule": SCHEDULER_INTERVAL_S},
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
