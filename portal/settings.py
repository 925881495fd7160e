"""Django settings. Everything is configured through environment variables (see README, Configuration).

Embedded defaults need nothing installed: SQLite, the simulated cluster, Celery tasks run eagerly
in-process. Set DATABASE_URL / REDIS_URL / CLUSTER_BACKEND for the full stack.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_choice, env_float, env_int, env_list, env_str
from scheduling.adapters.k8s.resources import quantity
from scheduling.engine.windows import parse_span, zone_problem

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)
# The public development key is used only with DEBUG=1 (`make demo`); anything else refuses to start
# without a real SECRET_KEY rather than sign sessions with a key everyone can read.
SECRET_KEY = env_str("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set: set it to a long random string (DEBUG=1 uses a public development key)"
        )
    SECRET_KEY = "django-insecure-gpu-portal-development-key-change-me"
PLACEHOLDER = "change-me"  # what .env.example and deploy/secret.yaml ship: never a real secret
if not DEBUG and SECRET_KEY.startswith(PLACEHOLDER):
    raise ImproperlyConfigured("SECRET_KEY is still the placeholder: `make secrets` prints one")
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
    "rest_framework.authtoken",  # kept only so its table can be emptied by tokens' migration 0002
    "django_filters",
    "axes",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",  # request.htmx, and htmx's JavaScript served from the project's static files
    "portal.tenants",
    "portal.jobs",
    "portal.tokens",
    "portal.notifications",
    "portal.schedules",
    "portal.serving",
    "portal.whatif",
    "portal.ops",
    "scheduling",
    "billing",
]

MIDDLEWARE = [
    "portal.middleware.HostileInputMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "portal.middleware.DatabaseOutageMiddleware",
    # Last, as django-axes asks: it turns the lockout raised during authentication into a 429.
    "axes.middleware.AxesMiddleware",
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
            "libraries": {"portal_format": "portal.pages.templatetags.portal_format"},
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
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(BASE_DIR / "staticfiles")))
STATICFILES_DIRS = [BASE_DIR / "static"]
# collectstatic (the Dockerfile runs it) writes content-hashed names with brotli and gzip copies;
# whitenoise serves them compressed with a year-long immutable cache. DEBUG=1 (the demo's dev server)
# serves the source files as they are. STATIC_STORAGE=simple skips the manifest (nothing collected).
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": {
            "manifest": "whitenoise.storage.CompressedManifestStaticFilesStorage",
            "simple": "django.contrib.staticfiles.storage.StaticFilesStorage",
        }[env_choice("STATIC_STORAGE", "manifest", {"manifest", "simple"})]
    },
}

# Job lists and pages refresh their live parts (state, reason, cost) this often, while visible (htmx).
LIVE_REFRESH_S = env_float("LIVE_REFRESH_S", 5.0)

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "job-list"
LOGOUT_REDIRECT_URL = "login"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.tokens.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PARSER_CLASSES": [
        "portal.api.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    # Per user and per address (``UserThrottle`` and ``IpThrottle``), both in one round trip to Redis.
    "DEFAULT_THROTTLE_CLASSES": ["portal.api.throttling.ApiThrottle"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "portal.api.pagination.Pagination",
    "PAGE_SIZE": env_int("API_PAGE_SIZE", 50),
    "DEFAULT_FILTER_BACKENDS": ["portal.api.filtering.FilterBackend"],
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
    "ENUM_NAME_OVERRIDES": {"JobStateEnum": "portal.jobs.states.JobState"},
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
    "idle-gpus": {"task": "billing.tasks.idle_check", "schedule": env_float("IDLE_CHECK_INTERVAL_S", 60.0)},
}

# --- Scheduling --------------------------------------------------------------------------------
CLUSTER_BACKEND = env_choice("CLUSTER_BACKEND", "simulated", {"simulated", "kubernetes"})
# Simulated cluster: a job "runs" for runtime / SIM_SPEEDUP wall seconds.
SIM_SPEEDUP = env_float("SIM_SPEEDUP", 60.0)
PLACEMENT_POLICY = env_str("PLACEMENT_POLICY", "portal")  # fragmentation-aware (docs/simulator.md)
# Decisions the forecast of estimated starts may take per run, twice a cycle (P50 and P90): pending
# jobs it does not reach get no estimate (Slurm's bf_max_job_test). See bench/bench_dryrun.py.
FORECAST_DECISIONS = env_int("FORECAST_DECISIONS", 3000)
# Backfill reservations per cycle (Slurm's backfill; docs/engine.md "Backfill reservations"): the first
# this many jobs waiting for capacity hold the room they get at their forecast start; 0 (the default)
# turns them off.
RESERVED_JOBS = env_int("RESERVED_JOBS", 0)
# Dry runs (POST /api/v1/jobs/check/) answer from a kept cycle state (scheduling.selectors). Once a
# cycle has run since (or after DRY_RUN_TTL_S), the next check is still answered from the kept state
# while a fresh one is built in the background, up to DRY_RUN_STALE_S old; 0 builds it in the request.
DRY_RUN_REFRESH_BEHIND = env_bool("DRY_RUN_REFRESH_BEHIND", True)
DRY_RUN_TTL_S = env_float("DRY_RUN_TTL_S", 5.0)
DRY_RUN_STALE_S = env_float("DRY_RUN_STALE_S", 60.0)
# Behind the requests, a state is rebuilt at most this often (a rebuild is a whole cycle's CPU in a web
# process; cycles every few seconds under a burst of submissions would otherwise keep one busy).
DRY_RUN_REFRESH_EVERY_S = env_float("DRY_RUN_REFRESH_EVERY_S", 5.0)
# ...and no more often than keeps that work within this share of a web process's CPU time (a state
# that took 2 s of CPU: every 20 s at 0.1; at most DRY_RUN_STALE_S / 2). 0: no such bound.
DRY_RUN_CPU_SHARE = env_float("DRY_RUN_CPU_SHARE", 0.1)
# With a shared cache (Redis), the scheduler hands its own cycle's final state to the web processes
# when one asks for a newer state, at most every DRY_RUN_REFRESH_EVERY_S (scheduling.dry_run, step 4):
# they load it instead of running the cycle again. 0: each web process builds its own.
DRY_RUN_PUBLISH = env_bool("DRY_RUN_PUBLISH", True)
# A job that never fits the cluster as configured (more than its queue's ceiling, a replica bigger than
# any node, a GPU model or MIG profile no node offers) is refused at submission with a 400 naming the
# limit. Set to 1 on clusters that grow on demand (an autoscaler adds nodes for pending pods): such a
# job then queues, its reason says it does not fit as configured.
QUEUE_NEVER_FITTING_JOBS = env_bool("QUEUE_NEVER_FITTING_JOBS", False)
SCHEDULER_SEED = env_int("SCHEDULER_SEED", 0)
# Node label whose value (on-demand, spot, reserved) prices the GPU-hours of jobs on that node.
CAPACITY_TYPE_LABEL = env_str("CAPACITY_TYPE_LABEL", "karpenter.sh/capacity-type")
# The taint spot nodes carry (key=true:NoSchedule); jobs submitted with ``spot: true`` tolerate it.
SPOT_TAINT_KEY = env_str("SPOT_TAINT_KEY", "spot")
# Node taints that announce a reclaim (a termination notice): the node's jobs are requeued at the
# taint's timeAdded, as if the node were gone. Karpenter's disruption taint, AWS's node termination
# handler (spot interruption and rebalance), GKE's impending termination.
SPOT_TERMINATION_TAINTS = env_list(
    "SPOT_TERMINATION_TAINTS",
    [
        "karpenter.sh/disrupted",
        "aws-node-termination-handler/spot-itn",
        "cloud.google.com/impending-node-termination",
    ],
)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.server": {"level": "WARNING"},
        "celery.app.trace": {"level": "WARNING"},
        "axes": {"level": "WARNING"},  # lockouts are warnings; every successful login is not news
    },
}

# --- Kubernetes backend and control loop (scheduling/adapters/kubernetes.py, docs/kubernetes.md) ---
# CLUSTER_BACKEND=kubernetes reads KUBECONFIG (first file of the list), else the in-cluster config.
KUBECONFIG = env_str("KUBECONFIG", "")
K8S_CONTEXT = env_str("K8S_CONTEXT", "")  # kubeconfig context; empty = the current one
K8S_SCHEDULER_NAME = env_str("K8S_SCHEDULER_NAME", "gpu-portal")  # schedulerName of the portal's pods
K8S_RACK_LABEL = env_str("K8S_RACK_LABEL", "topology.kubernetes.io/rack")
K8S_ZONE_LABEL = env_str("K8S_ZONE_LABEL", "topology.kubernetes.io/zone")
K8S_NVLINK_LABEL = env_str("K8S_NVLINK_LABEL", "nvidia.com/gpu.clique")  # NVLink domain (GPU feature discovery)
K8S_TIMEOUT_S = env_float("K8S_TIMEOUT_S", 10.0)  # connect and read timeout of every API call
K8S_WATCH_TIMEOUT_S = env_int("K8S_WATCH_TIMEOUT_S", 60)  # one watch's length before it resumes
K8S_SYNC_TIMEOUT_S = env_float("K8S_SYNC_TIMEOUT_S", 10.0)  # wait for the caches before a cycle
K8S_API_RETRIES = env_int("K8S_API_RETRIES", 3)  # attempts per call on 5xx/429/timeouts
K8S_API_BACKOFF_S = env_float("K8S_API_BACKOFF_S", 0.2)  # first retry delay, doubling
K8S_START_THREADS = env_int("K8S_START_THREADS", 8)  # pods created and bound at once after a cycle
K8S_RESYNC_S = env_float("K8S_RESYNC_S", 60.0)  # at most this long between full passes over pods and jobs
K8S_POD_GRACE_S = env_int("K8S_POD_GRACE_S", 30)  # grace period when preempting or cancelling
K8S_RUN_AS_USER = env_int("K8S_RUN_AS_USER", 1000)  # uid/gid of every pod (restricted PSS: non-root)
# An admitted job whose pods are not running after this long is requeued by the sweeper.
ADMITTED_TIMEOUT_S = env_float("ADMITTED_TIMEOUT_S", 600.0)
CLUSTER_SYNC_INTERVAL_S = env_float("CLUSTER_SYNC_INTERVAL_S", 15.0)
SWEEP_INTERVAL_S = env_float("SWEEP_INTERVAL_S", 60.0)
# A task whose worker died unacknowledged is redelivered after this long (Redis visibility timeout).
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT_S", 300)}
# Team namespaces kept in step (docs/kubernetes.md): each team's namespace gets a ResourceQuota at its
# queues' ceiling and a LimitRange with these container defaults (the seed's ai-limits); the cluster
# sync task checks them every NAMESPACE_SYNC_INTERVAL_S and rewrites any that drifted.
K8S_NAMESPACE_OBJECTS = env_bool("K8S_NAMESPACE_OBJECTS", True)
NAMESPACE_SYNC_INTERVAL_S = env_float("NAMESPACE_SYNC_INTERVAL_S", 60.0)
K8S_LIMIT_DEFAULT = env_list("K8S_LIMIT_DEFAULT", ["cpu=4", "memory=8Gi", "nvidia.com/gpu=1"])
K8S_LIMIT_DEFAULT_REQUEST = env_list("K8S_LIMIT_DEFAULT_REQUEST", ["cpu=2", "memory=4Gi", "nvidia.com/gpu=1"])
for _name, _items in (
    ("K8S_LIMIT_DEFAULT", K8S_LIMIT_DEFAULT),
    ("K8S_LIMIT_DEFAULT_REQUEST", K8S_LIMIT_DEFAULT_REQUEST),
):
    for _item in _items:
        _resource, _, _amount = _item.partition("=")
        try:
            quantity(_amount)
        except ValueError:
            raise ImproperlyConfigured(f"{_name}: {_item!r} is not resource=quantity (e.g. memory=8Gi)") from None
        if not _resource or not _amount:
            raise ImproperlyConfigured(f"{_name}: {_item!r} is not resource=quantity (e.g. memory=8Gi)")
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
# /metrics wants `Authorization: Bearer <METRICS_TOKEN>`; with no token set it answers 403 (closed by
# default). `make secrets` prints one. Admission waits counted over this window.
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
if not DEBUG and METRICS_TOKEN.startswith(PLACEHOLDER):
    raise ImproperlyConfigured("METRICS_TOKEN is still the placeholder: `make secrets` prints one")
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

# --- Notifications (README, Notifications) -----------------------------------------------------
# Links in mail and webhook bodies point here.
PORTAL_URL = env_str("PORTAL_URL", "http://127.0.0.1:8000")
NOTIFY_RETRIES = env_int("NOTIFY_RETRIES", 8)  # tries of one delivery before it is marked failed
NOTIFY_BACKOFF_S = env_float("NOTIFY_BACKOFF_S", 30.0)  # wait before the second try, doubling after
NOTIFY_BACKOFF_MAX_S = env_float("NOTIFY_BACKOFF_MAX_S", 3600.0)
NOTIFY_WEBHOOK_TIMEOUT_S = env_float("NOTIFY_WEBHOOK_TIMEOUT_S", 5.0)
# Webhooks to loopback, private or link-local addresses are refused unless this is on (a user's URL
# must not reach the portal's own network).
NOTIFY_WEBHOOK_ALLOW_PRIVATE = env_bool("NOTIFY_WEBHOOK_ALLOW_PRIVATE", False)
NOTIFY_MAX_AGE_S = env_float("NOTIFY_MAX_AGE_S", 86400.0)  # older events are not announced
NOTIFY_SWEEP_INTERVAL_S = env_float("NOTIFY_SWEEP_INTERVAL_S", 60.0)
CELERY_BEAT_SCHEDULE["notifications-sweep"] = {
    "task": "portal.notifications.tasks.sweep",
    "schedule": NOTIFY_SWEEP_INTERVAL_S,
}

# --- Job schedules (README, Scheduled and off-peak jobs) -----------------------------------------
# Beat looks for due schedules this often; a run is started only within the starting deadline of its
# instant (a beat that was down longer counts the older instants as missed instead of starting them).
SCHEDULE_FIRE_INTERVAL_S = env_float("SCHEDULE_FIRE_INTERVAL_S", 20.0)
SCHEDULE_STARTING_DEADLINE_S = env_float("SCHEDULE_STARTING_DEADLINE_S", 600.0)
# Off-peak jobs start only in these local hours (a span wrapping midnight is fine) and are billed at
# the price book's off-peak prices (capacity type "off-peak"; the seed prices them at 70 % of on-demand).
OFFPEAK_HOURS = env_str("OFFPEAK_HOURS", "20:00-08:00")
OFFPEAK_TIMEZONE = env_str("OFFPEAK_TIMEZONE", "UTC")
try:
    _offpeak = parse_span(OFFPEAK_HOURS)
except ValueError as exc:
    raise ImproperlyConfigured(f"OFFPEAK_HOURS: {exc}") from None
if _problem := zone_problem(OFFPEAK_TIMEZONE):
    raise ImproperlyConfigured(f"OFFPEAK_TIMEZONE: {_problem}")
CELERY_BEAT_SCHEDULE["schedules-fire"] = {
    "task": "portal.schedules.tasks.schedules_fire",
    "schedule": SCHEDULE_FIRE_INTERVAL_S,
}

# --- Inference services (README, Inference services) ---------------------------------------------
# The autoscaler's pass; the load comes from Prometheus (PROMETHEUS_URL, these queries with {namespace}
# and {service} filled in) or, without it, from the simulated cluster's wave of SERVING_SIM_PERIOD_S.
SERVING_AUTOSCALE_INTERVAL_S = env_float("SERVING_AUTOSCALE_INTERVAL_S", 15.0)
# Inference replicas may preempt training jobs of lower priority in any queue, not only their own
# (Policy.inference_preempts_training; off by default: preemption stays within a queue and reclaim).
INFERENCE_PREEMPTS_TRAINING = env_bool("INFERENCE_PREEMPTS_TRAINING", False)
SERVING_SIM_PERIOD_S = env_float("SERVING_SIM_PERIOD_S", 3600.0)
SERVING_RPS_QUERY = env_str(
    "SERVING_RPS_QUERY", 'sum(rate(http_requests_total{namespace="{namespace}",service="{service}"}[1m]))'
)
SERVING_CONCURRENCY_QUERY = env_str(
    "SERVING_CONCURRENCY_QUERY", 'sum(http_requests_in_flight{namespace="{namespace}",service="{service}"})'
)
CELERY_BEAT_SCHEDULE["services-autoscale"] = {
    "task": "portal.serving.tasks.services_autoscale",
    "schedule": SERVING_AUTOSCALE_INTERVAL_S,
}

# --- Security (README, Security settings) -------------------------------------------------------
# Behind a TLS-terminating proxy set SECURE_PROXY_SSL_HEADER=1: the proxy's X-Forwarded-Proto then
# tells Django the request was HTTPS (set it only when the proxy overwrites that header).
if env_bool("SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
# Probes and Prometheus scrape over plain HTTP inside the cluster.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
# The preload directive only permits submitting the domain to browsers' preload list; nothing is
# submitted by it.
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", not DEBUG)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# The OpenAPI schema and its docs pages: public, authenticated (any logged-in user or token) or off.
API_DOCS = env_choice("API_DOCS", "public" if DEBUG else "off", {"public", "authenticated", "off"})
# Request bodies: Django's own limit for forms, the API's JSON parser's limits for the API.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 1024 * 1024)
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 256 * 1024)
API_MAX_JSON_DEPTH = env_int("API_MAX_JSON_DEPTH", 20)

# Login lockout (django-axes): AXES_FAILURE_LIMIT wrong passwords for one username from one address
# lock that pair out for AXES_COOLOFF_S; the lockout page answers 429 with Retry-After.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_ENABLED = env_bool("AXES_ENABLED", True)
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 10)
AXES_COOLOFF_S = env_int("AXES_COOLOFF_S", 900)
AXES_COOLOFF_TIME = timedelta(seconds=AXES_COOLOFF_S)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "portal.tokens.views.lockout_response"
AXES_VERBOSE = False
# Behind a proxy, X-Forwarded-For names the client (one proxy hop by default).
AXES_IPWARE_PROXY_COUNT = env_int("AXES_PROXY_COUNT", 0) or None
AXES_IPWARE_META_PRECEDENCE_ORDER = (
    ["HTTP_X_FORWARDED_FOR", "REMOTE_ADDR"] if AXES_IPWARE_PROXY_COUNT else ["REMOTE_ADDR"]
)

# API throttling (DRF): per user and per client address, 429 with Retry-After. Failed token
# authentications are counted per address too, so guessing tokens is throttled as well.
API_THROTTLE_ENABLED = env_bool("API_THROTTLE_ENABLED", True)
API_THROTTLE_USER = env_str("API_THROTTLE_USER", "1200/min")
API_THROTTLE_IP = env_str("API_THROTTLE_IP", "2400/min")
API_THROTTLE_ANON = env_str("API_THROTTLE_ANON", "120/min")
API_THROTTLE_AUTH_FAILURES = env_str("API_THROTTLE_AUTH_FAILURES", "20/min")
API_NUM_PROXIES = env_int("API_NUM_PROXIES", 0) or None
REST_FRAMEWORK["NUM_PROXIES"] = API_NUM_PROXIES
# Throttle counters live in the cache: Redis when REDIS_URL is set (shared by every web process).
CACHES = {
    "default": (
        {"BACKEND": "portal.cache.RedisCache", "LOCATION": REDIS_URL, "KEY_PREFIX": "gpu-portal"}
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}
# Idempotency-Key on submit: a key and its first answer are kept this long.
IDEMPOTENCY_TTL_S = env_int("IDEMPOTENCY_TTL_S", 24 * 3600)
# Seconds a client is told to wait (Retry-After) when the database is unreachable.
DB_OUTAGE_RETRY_AFTER_S = env_int("DB_OUTAGE_RETRY_AFTER_S", 5)

# A write that asks for a cycle (submit, cancel) gets one this many seconds later: a burst shares it.
CYCLE_BATCH_S = env_float("CYCLE_BATCH_S", 1.0)
# Requested cycles take at most this share of a worker's time: after a cycle of d seconds, the next
# one a write asks for starts no sooner than d / CYCLE_REQUEST_SHARE after that cycle's start (and
# no later than SCHEDULER_INTERVAL_S after the write). 0: only CYCLE_BATCH_S.
CYCLE_REQUEST_SHARE = env_float("CYCLE_REQUEST_SHARE", 0.25)

# An admitted job whose pods never run (Kueue's waitForPodsReady): requeued with exponential back-off
# (ADMITTED_BACKOFF_BASE_S doubling up to ADMITTED_BACKOFF_MAX_S), failed after ADMITTED_REQUEUE_LIMIT.
ADMITTED_REQUEUE_LIMIT = env_int("ADMITTED_REQUEUE_LIMIT", 3)
ADMITTED_BACKOFF_BASE_S = env_float("ADMITTED_BACKOFF_BASE_S", 60.0)
ADMITTED_BACKOFF_MAX_S = env_float("ADMITTED_BACKOFF_MAX_S", 3600.0)

# Queues page: every ClusterQueue's quota, use and pending demand per GPU model is sampled this often
# (the charts of usage against quota and pending demand over time are drawn from the samples).
QUEUE_SAMPLE_INTERVAL_S = env_float("QUEUE_SAMPLE_INTERVAL_S", 300.0)
CELERY_BEAT_SCHEDULE["queue-sample"] = {"task": "portal.ops.tasks.queue_sample", "schedule": QUEUE_SAMPLE_INTERVAL_S}
