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


@pytest.mark.django_db
def test_adding_correcting_and_withdrawing_a_price_in_the_admin_goes_into_the_audit_trail(world, logged_in):
    from portal.ops.models import AuditEntry

    client = logged_in("admin")
    when = timezone.localtime(timezone.now() + timedelta(days=30))
    form = {
        "resource": "gpu", "gpu_model": "T4", "capacity_type": "spot", "usd_per_hour": "0.20",
        "effective_from_0": when.strftime("%Y-%m-%d"), "effective_from_1": when.strftime("%H:%M:%S"), "note": "",
    }  # fmt: skip
    assert client.post("/admin/billing/pricebookentry/add/", form).status_code == 302
    entry = PriceBookEntry.objects.get(usd_per_hour=Decimal("0.20"), gpu_model="T4", capacity_type="spot")
    client.post(f"/admin/billing/pricebookentry/{entry.pk}/change/", {**form, "usd_per_hour": "0.25"})
    client.post(f"/admin/billing/pricebookentry/{entry.pk}/delete/", {"post": "yes"})
    trail = list(AuditEntry.objects.order_by("id").values_list("action", "field", "old_value", "new_value"))
    assert trail == [
        ("price-add", "usd_per_hour", "", "0.2"),
        ("price-change", "usd_per_hour", "0.2", "0.25"),
        ("price-delete", "usd_per_hour", "0.25", ""),
    ]
