"""``libflow deliveries list|replay``: a webhook's deliveries through the public API."""

from __future__ import annotations

import argparse

from libflow.cli.connection import add_connection_options, add_project_argument, client_of
from libflow.cli.output import add_output_option, print_record, print_records

DELIVERY_COLUMNS = (
    ("ID", lambda d: d.get("deliveryId")),
    ("STATUS", lambda d: d.get("status")),
    ("ATTEMPTS", lambda d: d.get("attempts")),
    ("RUN", lambda d: d.get("runId")),
    ("SENDER ID", lambda d: d.get("externalId")),
    ("RECEIVED", lambda d: d.get("receivedDate")),
)


def add_deliveries_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``libflow deliveries list|replay`` to the command's subparsers."""
    deliveries = sub.add_parser("deliveries", help="a webhook's deliveries, and replaying one")
    actions = deliveries.add_subparsers(dest="action", required=True)

    li = actions.add_parser("list", help="the webhook's deliveries, newest first")
    add_project_argument(li)
    li.add_argument("webhook_id", metavar="WEBHOOK_ID")
    li.add_argument("--limit", type=int, default=100, help="at most this many (100)")
    add_output_option(li)
    add_connection_options(li)
    li.set_defaults(run=list_deliveries)

    r = actions.add_parser(
        "replay", help="run a stored delivery again, as a new run; print the run's record"
    )
    add_project_argument(r)
    r.add_argument("webhook_id", metavar="WEBHOOK_ID")
    r.add_argument("delivery_id", metavar="DELIVERY_ID")
    add_output_option(r)
    add_connection_options(r)
    r.set_defaults(run=replay_delivery)


async def list_deliveries(args: argparse.Namespace) -> None:
    """``libflow deliveries list``."""
    async with client_of(args) as client:
        found = await client.webhooks.deliveries(args.webhook_id, limit=args.limit)
    print_records([dict(d) for d in found], args.output, DELIVERY_COLUMNS)


async def replay_delivery(args: argparse.Namespace) -> None:
    """``libflow deliveries replay``."""
    async with client_of(args) as client:
        run = await client.webhooks.replay(args.webhook_id, args.delivery_id)
    print_record(dict(run), args.output)
