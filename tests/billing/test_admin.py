"""The price book in the admin (``billing.admin``): prices in force are read-only."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import PriceBookEntry


@pytest.mark.django_db
def test_prices_in_force_cannot_be_edited_or_deleted_in_the_admin(world, logged_in):
    past = PriceBookEntry.objects.filter(resource="gpu", gpu_model="T4", capacity_type="spot").first()
    future = PriceBookEntry.objects.create(
        resource="gpu", gpu_model="T4", capacity_type="spot",
        effective_from=timezone.now() + timedelta(days=30), usd_per_hour=Decimal("0.2"),
    )  # fmt: skip
    client = logged_in("admin")
    assert client.get(f"/admin/billing/pricebookentry/{past.pk}/delete/").status_code == 403
    assert client.get(f"/admin/billing/pricebookentry/{future.pk}/delete/").status_code == 200
    page = client.get(f"/admin/billing/pricebookentry/{past.pk}/change/").content.decode()
    assert 'name="usd_per_hour"' not in page
    page = client.get(f"/admin/billing/pricebookentry/{future.pk}/change/").content.decode()
    assert 'name="usd_per_hour"' in page
