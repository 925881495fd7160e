"""Existing ``rest_framework.authtoken`` keys become hashed API tokens (they keep working), and the
plain-text rows are deleted: after this migration no key is stored anywhere."""

import hashlib

from django.db import migrations


def forwards(apps, schema_editor):
    Token = apps.get_model("authtoken", "Token")
    ApiToken = apps.get_model("tokens", "ApiToken")
    for old in Token.objects.all():
        ApiToken.objects.get_or_create(
            key_hash=hashlib.sha256(old.key.encode("utf-8")).hexdigest(),
            defaults={"user_id": old.user_id, "name": "migrated token", "prefix": old.key[:6], "created_at": old.created},
        )
    Token.objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("tokens", "0001_initial"),
        ("authtoken", "0004_alter_tokenproxy_options"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
