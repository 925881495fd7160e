"""Notification services: ``events`` (what happened and who is told: called where transitions are
applied, cheap, no I/O) and ``delivery`` (sending one notification: e-mail or a signed webhook)."""
