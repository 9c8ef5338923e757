"""The etcd ledger over TLS and with etcd's own authentication, against real etcd servers on loopback
(issue 12, M7; recipe T). Before: no option for a CA, a client certificate or a user, and a TLS failure
was "did not answer", retried every cycle forever.

Two servers for the module: one with TLS and ``--client-cert-auth`` (mutual TLS), one with TLS and
user/password authentication (etcd's JSON gateway refuses client certificates once auth is on, so the
two cannot be combined there). The certificates are made fresh by ``openssl``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.errors import ConfigError
from ebb.ledger import EtcdAuth, EtcdLedger, open_ledger
from ebb.ledger.election import LeaderElector
from ebb.ledger.review import open_compensation_log
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.testing.etcd import TlsFiles, enable_etcd_auth, local_etcd, make_tls_files, openssl_binary

pytest.importorskip("etcd3gw")
runner = CliRunner()
USER, PASSWORD, AUTH_ROOT = "ebb", "s3cret-pw", "/ebb-auth/"


def _cycle(cid: str) -> CycleRecord:
    d = DecisionRecord(DecisionId(f"{cid}-d"), CycleId(cid), RunId("r1"), 1_000, "chat", "scale_down", 4, 3,
                       reasons=("idle",))
    return CycleRecord(CycleId(cid), RunId("r1"), 1_000, "ebb", (d,), {"replicas": 4})


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    binary = openssl_binary()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must provide openssl (apt-get install -y openssl)")
        pytest.skip("openssl not installed")
    return make_tls_files(tmp_path_factory.mktemp("tls"), binary)


@pytest.fixture(scope="module")
def mtls_url(etcd_binary_path: str, tls: TlsFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("etcd-mtls")
    with local_etcd(etcd_binary_path, d, log_path=d / "etcd.log", tls=tls, client_cert_auth=True) as url:
        yield url


@pytest.fixture(scope="module")
def auth_url(etcd_binary_path: str, tls: TlsFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("etcd-auth")
    with local_etcd(etcd_binary_path, d, log_path=d / "etcd.log", tls=tls) as url:
        enable_etcd_auth(url, user=USER, password=PASSWORD, key_prefix=AUTH_ROOT, tls=tls)
        yield url


def _mtls(tls: TlsFiles, **changes: str | None) -> EtcdAuth:
    files: dict[str, str | None] = {"ca_file": str(tls.ca), "cert_file": str(tls.client_cert),
                                    "key_file": str(tls.client_key), **changes}
    return EtcdAuth(**files)


def _ledger_url(url: str, prefix: str) -> str:
    return url.replace("https://", "etcd+https://") + "/" + prefix


# -- mutual TLS -------------------------------------------------------------------------------------------


def test_the_right_ca_and_client_certificate_write_and_read_a_cycle(mtls_url: str, tls: TlsFiles) -> None:
    prefix = f"t/{uuid.uuid4().hex}"
    with EtcdLedger(mtls_url, prefix=prefix, auth=_mtls(tls)) as led:
        assert led.append_cycle(_cycle("c1")) is True
    led2 = open_ledger(_ledger_url(mtls_url, prefix), writer=True, etcd_auth=_mtls(tls))
    try:
        assert led2.cycles() == [_cycle("c1")]
    finally:
        led2.close()


@pytest.mark.parametrize(("changes", "flag", "why"), [
    ({"ca_file": "other"}, "--etcd-ca", "TLS verification of the server failed"),
    ({"ca_file": None}, "--etcd-ca", "TLS verification of the server failed"),
    ({"cert_file": None, "key_file": None}, "--etcd-cert", "ended the TLS handshake"),
    ({"key_file": "server_key"}, "--etcd-key", "do not match"),
])
def test_a_tls_failure_is_a_permanent_config_error_at_once_naming_the_flag(
    mtls_url: str, tls: TlsFiles, changes: dict[str, str | None], flag: str, why: str,
) -> None:
    named = {"other": str(tls.other_ca), "server_key": str(tls.server_key)}
    auth = _mtls(tls, **{k: named.get(v, v) if v else None for k, v in changes.items()})
    led = EtcdLedger(mtls_url, prefix="t/x", auth=auth, timeout_s=5.0)
    try:
        # Permanent (a ConfigError naming the flag and the TLS failure), not a timeout retried later:
        # how long it takes — one attempt, under 3 s with a 5 s timeout — is bench/deadlines.py's.
        with pytest.raises(ConfigError, match=why) as info:
            led.cycles()
        assert flag in str(info.value) and info.value.__cause__ is not None
    finally:
        led.close()
    with pytest.raises(ConfigError, match=flag):  # what `ebb run` opens: refused before the first cycle
        open_ledger(_ledger_url(mtls_url, "t/x"), writer=True, etcd_auth=auth)


def test_tls_options_need_an_https_url_and_readable_files(tls: TlsFiles, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="etcd\\+https://"):
        EtcdLedger("http://127.0.0.1:2379", auth=EtcdAuth(ca_file=str(tls.ca)))
    with pytest.raises(ConfigError, match="--etcd-cert .*missing.pem"):
        EtcdLedger("https://127.0.0.1:2379", auth=EtcdAuth(cert_file=str(tmp_path / "missing.pem"),
                                                           key_file=str(tls.client_key)))
    with pytest.raises(ConfigError, match="etcd ledgers only"):
        open_ledger(tmp_path / "l.sqlite", etcd_auth=EtcdAuth(ca_file=str(tls.ca)))


# -- user and password ------------------------------------------------------------------------------------


def _user(tls: TlsFiles, password: str = PASSWORD) -> EtcdAuth:
    return EtcdAuth(ca_file=str(tls.ca), user=USER, password=password)


def test_a_user_with_the_right_password_writes_reads_and_campaigns(auth_url: str, tls: TlsFiles) -> None:
    prefix = f"{AUTH_ROOT.strip('/')}/{uuid.uuid4().hex}"
    with EtcdLedger(auth_url, prefix=prefix, auth=_user(tls)) as led:
        assert led.append_cycle(_cycle("c1")) is True
        assert led.get_cycle(CycleId("c1")) == _cycle("c1")
        led._gw._token = "expired.token"  # as after etcd's --auth-token-ttl: authenticated again, once
        assert led.cycles() == [_cycle("c1")]
        assert led._gw._token != "expired.token"
    with LeaderElector(auth_url, f"{AUTH_ROOT}{uuid.uuid4().hex}/leader", "a", ttl_s=3, auth=_user(tls)) as e:
        assert e.campaign(timeout_s=10) is not None


@pytest.mark.parametrize(("auth", "why"), [
    ("wrong", "refused user 'ebb'.*--etcd-password-file"),
    ("none", "requires authentication.*--etcd-user"),
])
def test_wrong_or_missing_credentials_are_a_permanent_config_error(auth_url: str, tls: TlsFiles, auth: str,
                                                                   why: str) -> None:
    opts = _user(tls, "not-it") if auth == "wrong" else EtcdAuth(ca_file=str(tls.ca))
    with EtcdLedger(auth_url, prefix=AUTH_ROOT + "x", auth=opts) as led, pytest.raises(ConfigError, match=why):
        led.cycles()


def test_a_prefix_outside_the_users_role_is_permission_denied(auth_url: str, tls: TlsFiles) -> None:
    with EtcdLedger(auth_url, prefix="elsewhere", auth=_user(tls)) as led, \
            pytest.raises(ConfigError, match="denied user 'ebb'.*permission denied"):
        led.cycles()


# -- the CLI flags ----------------------------------------------------------------------------------------


def test_explain_and_review_take_the_tls_flags(mtls_url: str, tls: TlsFiles) -> None:
    prefix = f"t/{uuid.uuid4().hex}"
    with EtcdLedger(mtls_url, prefix=prefix, auth=_mtls(tls)) as led:
        led.append_cycle(_cycle("c1"))
    flags = ["--ledger", _ledger_url(mtls_url, prefix), "--etcd-ca", str(tls.ca), "--etcd-cert",
             str(tls.client_cert), "--etcd-key", str(tls.client_key)]
    ok = runner.invoke(app, ["explain", "--list", *flags])
    assert ok.exit_code == 0 and "c1-d" in ok.output
    assert runner.invoke(app, ["explain", "c1-d", *flags]).exit_code == 0
    assert runner.invoke(app, ["review", "list", *flags]).output.strip() == "no pending review items"
    wrong = [*flags]
    wrong[3] = str(tls.other_ca)
    bad = runner.invoke(app, ["explain", "--list", *wrong])
    assert bad.exit_code == 2 and "--etcd-ca" in bad.output and len(bad.output.strip().splitlines()) == 1


def test_the_password_comes_from_a_file_or_the_environment_never_a_flag_value(
    auth_url: str, tls: TlsFiles, tmp_path: Path,
) -> None:
    prefix = f"{AUTH_ROOT.strip('/')}/{uuid.uuid4().hex}"
    log = open_compensation_log(_ledger_url(auth_url, prefix), etcd_auth=_user(tls))
    try:
        log.enqueue("ev-1", "late", 1_714_564_800.0)
    finally:
        log.close()
    pw = tmp_path / "pw"
    pw.write_text(PASSWORD + "\n", encoding="utf-8")
    base = ["review", "list", "--ledger", _ledger_url(auth_url, prefix), "--etcd-ca", str(tls.ca),
            "--etcd-user", USER]
    from_file = runner.invoke(app, [*base, "--etcd-password-file", str(pw)])
    assert from_file.exit_code == 0 and from_file.output.startswith("ev-1\tpending")
    from_env = runner.invoke(app, base, env={"EBB_ETCD_PASSWORD": PASSWORD})
    assert from_env.exit_code == 0 and "ev-1" in from_env.output
    missing = runner.invoke(app, base, env={"EBB_ETCD_PASSWORD": ""})
    assert missing.exit_code == 2 and "EBB_ETCD_PASSWORD" in missing.output


def test_ebb_run_exits_2_with_one_line_on_a_tls_failure_instead_of_retrying(
    mtls_url: str, tls: TlsFiles, tmp_path: Path,
) -> None:
    """Recipe T: before, one ERROR per cycle ("did not answer ... SSLCertVerificationError") and exit 0."""
    ebb = Path(sys.executable).with_name("ebb")
    res = subprocess.run([str(ebb), "run", "--source", "agents", "--agent", "http://127.0.0.1:9", "--workers", "1",
                          "--ledger", _ledger_url(mtls_url, "t/run"), "--etcd-ca", str(tls.other_ca),
                          "--etcd-cert", str(tls.client_cert), "--etcd-key", str(tls.client_key),
                          "--cycles", "30", "--no-log-json"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "Traceback" not in res.stderr + res.stdout
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    message = " ".join(res.stderr.split("error:", 1)[-1].split())  # the console may wrap the one message
    assert len(errors) == 1 and "--etcd-ca" in message and "TLS verification" in message
