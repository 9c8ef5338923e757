"""``ebb review``: the rollback channel's manual review queue — compensations the controller could not
finish: over their 0.8 s budget, a step over its replica cap (the pod is gone and the budget forbids
the scale-up), the actuator refusing. An item's id is its root event: the scale-down decision id.

* ``ebb review list [--all]``      pending items (``--all``: resolved ones too), oldest first
* ``ebb review show ID``           one item: event id, status, reason, enqueue time, retries, note
* ``ebb review retry ID``          mark it pending again, ``retries`` + 1: the running controller of the
  item's run picks it up within its review poll (5 s) and compensates it as attempt ``retries``
  (``<ID>-rollback-r<k>`` in the ledger); a completed one is resolved, a failed one re-queued with
  the new reason
* ``ebb review resolve ID [--note TEXT]``  close it, with what the operator did

``--ledger PATH|URL`` (default ``ebb-ledger.sqlite``) is the ledger the log lives next to; a missing
ledger file is an error, never silently created. ``list`` and ``show`` open an SQLite ledger
read-only (a read-only mount works); ``retry`` and ``resolve`` write. etcd ledgers take
``--etcd-ca/--etcd-cert/--etcd-key/--etcd-user/--etcd-password-file``. A malformed item is an error
for ``show``/``retry``/``resolve``; ``list`` lists the others and prints one ``warning: skipped ...``
line on stderr. Exit codes: 0 ok, 2 unknown or malformed id or unusable ledger — one line, never a
traceback.
"""

from __future__ import annotations

from datetime import UTC, datetime
from collections.abc import Callable
from typing import Annotated, TypeVar

import typer

from ebb.cli.app import app
from ebb.cli.help_format import EbbTyper
from ebb.cli.ledger_options import (EtcdCaOpt, EtcdCertOpt, EtcdKeyOpt, EtcdPasswordFileOpt, EtcdUserOpt, etcd_auth,
                                    quiet_row_warnings, skipped_warning)
from ebb.errors import EbbError
from ebb.ledger import DEFAULT_PATH
from ebb.ledger.location import EtcdAuth
from ebb.ledger.review import CompensationLog, ReviewItem, open_compensation_log

__all__ = ["review_app", "format_item"]

review_app = EbbTyper(help="Manual review queue of the rollback channel.", no_args_is_help=True)
app.add_typer(review_app, name="review")

T = TypeVar("T")

LedgerOpt = Annotated[str, typer.Option("--ledger", help="Ledger file or URL (sqlite path, etcd://HOST:PORT/PREFIX).")]


def _stamp(ts: float) -> str:
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"ts={ts}"


def format_item(item: ReviewItem) -> str:
    """Multi-line text of one item, as ``ebb review show`` prints it."""
    lines = [f"review item {item.event_id}", f"  status:   {item.status}", f"  enqueued: {_stamp(item.ts)}",
             f"  reason:   {item.reason}", f"  retries:  {item.retries}"]
    if item.note:
        lines.append(f"  note:     {item.note}")
    return "\n".join(lines)


def _auth(ca: str | None, cert: str | None, key: str | None, user: str | None,
          password_file: str | None) -> EtcdAuth | None:
    try:
        return etcd_auth(ca, cert, key, user, password_file)
    except EbbError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


def _with_log(ledger: str, op: Callable[[CompensationLog], T], *, read_only: bool = False,
              auth: EtcdAuth | None = None) -> T:
    """Run ``op`` on the log next to ``ledger`` and close it; any Ebb error → one line, exit 2."""
    try:
        log = open_compensation_log(ledger, create=False, read_only=read_only, etcd_auth=auth)
        try:
            return op(log)
        finally:
            log.close()
    except EbbError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


def _one_line(text: str) -> str:
    """A stored reason or note on one output line (a forged one may hold newlines or tabs)."""
    return " ".join(text.split())


@review_app.command("list")
def list_cmd(ledger: LedgerOpt = DEFAULT_PATH,
             all_: Annotated[bool, typer.Option("--all", help="Include resolved items.")] = False,
             etcd_ca: EtcdCaOpt = None, etcd_cert: EtcdCertOpt = None, etcd_key: EtcdKeyOpt = None,
             etcd_user: EtcdUserOpt = None, etcd_password_file: EtcdPasswordFileOpt = None) -> None:
    """List review items, oldest first."""
    auth = _auth(etcd_ca, etcd_cert, etcd_key, etcd_user, etcd_password_file)
    with quiet_row_warnings():
        items, skipped = _with_log(ledger, lambda log: (log.list(None if all_ else "pending"), log.skipped),
                                   read_only=True, auth=auth)
    if not items:
        typer.echo("review queue is empty" if all_ else "no pending review items")
    for it in items:
        typer.echo(f"{it.event_id}\t{it.status}\t{_stamp(it.ts)}\tretries={it.retries}\t{_one_line(it.reason)}")
    warning = skipped_warning(ledger, skipped)
    if warning is not None:
        typer.echo(warning, err=True)


@review_app.command("show")
def show_cmd(item_id: Annotated[str, typer.Argument(metavar="ID")], ledger: LedgerOpt = DEFAULT_PATH,
             etcd_ca: EtcdCaOpt = None, etcd_cert: EtcdCertOpt = None, etcd_key: EtcdKeyOpt = None,
             etcd_user: EtcdUserOpt = None, etcd_password_file: EtcdPasswordFileOpt = None) -> None:
    """Show one review item."""
    auth = _auth(etcd_ca, etcd_cert, etcd_key, etcd_user, etcd_password_file)
    item = _with_log(ledger, lambda log: log.show(item_id), read_only=True, auth=auth)
    if item is None:
        typer.echo(f"error: no review item {item_id!r}; `ebb review list --all` shows the queue", err=True)
        raise typer.Exit(2)
    typer.echo(format_item(item))


@review_app.command("retry")
def retry_cmd(item_id: Annotated[str, typer.Argument(metavar="ID")], ledger: LedgerOpt = DEFAULT_PATH,
              etcd_ca: EtcdCaOpt = None, etcd_cert: EtcdCertOpt = None, etcd_key: EtcdKeyOpt = None,
              etcd_user: EtcdUserOpt = None, etcd_password_file: EtcdPasswordFileOpt = None) -> None:
    """Mark an item pending again: the running controller compensates it (attempt = retries)."""
    auth = _auth(etcd_ca, etcd_cert, etcd_key, etcd_user, etcd_password_file)
    item = _with_log(ledger, lambda log: log.retry(item_id), auth=auth)
    typer.echo(f"{item.event_id}: pending again (retries={item.retries}); the running controller of its run "
               "compensates it within its review poll")


@review_app.command("resolve")
def resolve_cmd(item_id: Annotated[str, typer.Argument(metavar="ID")],
                note: Annotated[str, typer.Option("--note", help="What was done.")] = "",
                ledger: LedgerOpt = DEFAULT_PATH,
                etcd_ca: EtcdCaOpt = None, etcd_cert: EtcdCertOpt = None, etcd_key: EtcdKeyOpt = None,
                etcd_user: EtcdUserOpt = None, etcd_password_file: EtcdPasswordFileOpt = None) -> None:
    """Mark an item resolved."""
    auth = _auth(etcd_ca, etcd_cert, etcd_key, etcd_user, etcd_password_file)
    item = _with_log(ledger, lambda log: log.resolve(item_id, note), auth=auth)
    typer.echo(f"{item.event_id}: resolved" + (f" ({item.note})" if item.note else ""))
