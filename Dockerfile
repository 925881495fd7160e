# The portal image: web (gunicorn), Celery worker and beat all run from it (docker-compose.yml and deploy/).
#   docker build -t registry.example.com/gpu-portal:0.1.0 .
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY requirements.txt .
RUN pip install -r requirements.txt
COPY . .
RUN SECRET_KEY=build python manage.py collectstatic --noinput \
    && useradd --uid 1000 --user-group --no-create-home portal
USER 1000:1000
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
