"""Inbound webhooks: their management, signatures, the inbox, and running what it holds."""
