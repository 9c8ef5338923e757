"""``EtcdAuth``: the etcd TLS/auth options as the CLI flags build them (no server needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ebb.errors import ConfigError
from ebb.ledger.location import MAX_PASSWORD_BYTES, PASSWORD_ENV, EtcdAuth, check_auth_fits, parse_location


def test_no_flag_gives_no_options() -> None:
    assert EtcdAuth.from_flags(env={PASSWORD_ENV: "ignored without a user"}) is None
    assert EtcdAuth().empty and not EtcdAuth().tls


def test_the_password_is_the_first_line_of_the_file_and_never_shown(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("hunter2\r\nsecond line\n", encoding="utf-8")
    auth = EtcdAuth.from_flags(user="ebb", password_file=str(pw), env={PASSWORD_ENV: "not this one"})
    assert auth is not None and auth.password == "hunter2" and auth.user == "ebb"
    assert "hunter2" not in repr(auth)


def test_without_a_file_the_password_comes_from_the_environment() -> None:
    auth = EtcdAuth.from_flags(user="ebb", env={PASSWORD_ENV: "from-env"})
    assert auth is not None and auth.password == "from-env"


@pytest.mark.parametrize(("kw", "match"), [
    ({"user": "ebb"}, "needs a password.*--etcd-password-file.*EBB_ETCD_PASSWORD"),
    ({"cert": "c.pem"}, "--etcd-cert and --etcd-key go together"),
    ({"key": "k.pem"}, "--etcd-cert and --etcd-key go together"),
])
def test_incomplete_options_name_the_missing_flag(kw: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EtcdAuth.from_flags(env={}, **kw)


def test_a_password_file_without_a_user_or_unreadable_or_empty_is_refused(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("x\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="without --etcd-user"):
        EtcdAuth.from_flags(password_file=str(pw), env={})
    with pytest.raises(ConfigError, match="--etcd-password-file .*absent"):
        EtcdAuth.from_flags(user="ebb", password_file=str(tmp_path / "absent"), env={})
    pw.write_text("\nsecret on line 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="first line is empty"):
        EtcdAuth.from_flags(user="ebb", password_file=str(pw), env={})
    pw.write_bytes(b"x" * (MAX_PASSWORD_BYTES + 1))
    with pytest.raises(ConfigError, match="larger than"):
        EtcdAuth.from_flags(user="ebb", password_file=str(pw), env={})


def test_etcd_options_on_a_sqlite_ledger_are_refused() -> None:
    with pytest.raises(ConfigError, match="etcd ledgers only"):
        check_auth_fits(parse_location("ledger.sqlite"), EtcdAuth(ca_file="ca.pem"))
    check_auth_fits(parse_location("etcd+https://127.0.0.1:2379/ebb"), EtcdAuth(ca_file="ca.pem"))
    check_auth_fits(parse_location("ledger.sqlite"), None)
