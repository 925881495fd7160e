"""The delivery task (``tasks``), apart from ``portal.notifications.tasks`` so the events service can enqueue it."""
