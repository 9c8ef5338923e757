"""Red-team hardening of the Prometheus source: the selector (M1), hostile answers (H1, M4), auth/TLS.

The peers are tiny socket servers on loopback that misbehave on purpose (the reproductions'
``evil_http.py`` modes, scaled down so a test takes well under a second each; :mod:`ebb.testing.hostile_http`,
started by the ``peer`` fixture). How long a refusal or a deadline takes is ``bench/deadlines.py``'s;
here a deadline shows in the error it raises and in the work left undone (trickle unsent, queries unasked).
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from shutil import which

import pytest

from ebb.errors import ConfigError, EbbError, InputError, SourceUnavailable
from ebb.live.gate_probe import prometheus_gate_probe
from ebb.model import live as names
from ebb.sources.http_get import TlsOptions
from ebb.sources.prometheus import (DEFAULT_SELECTOR, MAX_SERIES, LabelMatcher, PrometheusClient, PrometheusSource,
                                    PromQueries, Selector)
from ebb.testing.hostile_http import HostilePeer, answer, self_signed, server_context, stream

def _ok(kind: str, result: object, **extra: object) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": kind, "result": result}, **extra}).encode()


EMPTY = _ok("matrix", [])


# -- the selector ------------------------------------------------------------------------------
@pytest.mark.parametrize("text, rendered", [
    ('job="ebb"', 'job="ebb"'),
    (' job = "ebb" , namespace=~\'serving|canary\' ,', 'job="ebb",namespace=~"serving|canary"'),
    ('{job!="x"}', 'job!="x"'),
    ('pod!~"w\\\\d+"', 'pod!~"w\\\\d+"'),          # the regex w\d+, its backslash escaped in PromQL
    ('a="\\""', 'a="\\""'),                       # a value that is one double quote
    ("a='it\\'s'", 'a="it\'s"'),
    ('a="x} or vector(1) or up{"', 'a="x} or vector(1) or up{"'),  # PromQL-looking text, inside the quotes
    ('team="équipe"', 'team="équipe"'),
    ('', ''),
    ('  {}  ', ''),
])
def test_a_selector_is_parsed_and_rendered_back_as_label_matchers_only(text: str, rendered: str) -> None:
    sel = Selector.parse(text)
    assert sel.render() == rendered
    assert Selector.parse(sel.render()) == sel


def test_the_parsed_values_are_what_prometheus_compares() -> None:
    assert Selector.parse('pod=~"w\\\\d+",a="\\"",b=\'it\\\'s\'').matchers == (
        LabelMatcher("pod", "=~", "w\\d+"), LabelMatcher("a", "=", '"'), LabelMatcher("b", "=", "it's"))


@pytest.mark.parametrize("text, why", [
    ('job=ebb', "expected a quoted value"),
    ('job="ebb"} or vector(1) or {a="b"', "expected ','"),
    ('job="ebb" or up', "expected ','"),
    ('job="ebb"}[5m]', "expected ','"),
    ('job="ebb"}) or sum(up', "expected ','"),
    ('job="ebb" # comment', "expected ','"),
    ('job="ebb";drop', "expected ','"),
    ('__name__="up"', "reserved"),
    ('__meta_kubernetes_pod_name="x"', "reserved"),
    ('job=="x"', "expected a quoted value"),
    ('job~"x"', "expected one of"),
    ('job<"x"', "expected one of"),
    ('job="unterminated', "unterminated"),
    ('job="a\\d"', "unsupported escape"),
    ('job="a\\u0022"', "unsupported escape"),
    ('job="a\nb"', "control character"),
    ('job="a\x00"', "control character"),
    ('"job"="x"', "expected a label name"),
    ('job="a",,b="c"', "expected a label name"),
    ('1job="x"', "expected a label name"),
    ('job=`x`', "expected a quoted value"),
    ('up{job="x"}', "expected one of"),
    ('job="x",' * 600, "longer than"),
])
def test_anything_but_label_matchers_is_a_config_error_naming_the_fix(text: str, why: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(why)) as info:
        Selector.parse(text)
    assert "fix:" in str(info.value) and "\n" not in str(info.value)


_RENDERED = re.compile(r'(?:[A-Za-z_][A-Za-z0-9_]*(?:=~|!~|!=|=)"(?:[^"\\]|\\[\\"])*")'
                       r'(?:,[A-Za-z_][A-Za-z0-9_]*(?:=~|!~|!=|=)"(?:[^"\\]|\\[\\"])*")*')


def test_no_input_gets_past_the_parser_as_anything_but_matchers() -> None:
    # Random PromQL-ish text: either refused, or rendered as matchers that re-parse to themselves.
    rng = random.Random(12)
    alphabet = 'ab_=!~"\'\\,{}()[] #\n|.*+-or1'
    accepted = 0
    for _ in range(4000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))
        if rng.random() < 0.5:
            text = 'job="' + text + '"'
        try:
            sel = Selector.parse(text)
        except ConfigError:
            continue
        accepted += 1
        out = sel.render()
        assert out == "" or _RENDERED.fullmatch(out), (text, out)
        assert Selector.parse(out) == sel
        assert sel.select(names.ROUTER_QUEUED) == (f"{names.ROUTER_QUEUED}{{{out}}}" if out else names.ROUTER_QUEUED)
    assert accepted > 100  # the property was exercised on accepted input, not only on refusals


def test_queries_put_the_matchers_in_every_series_selector() -> None:
    q = PromQueries.build(Selector.parse(DEFAULT_SELECTOR), "4s")
    assert q.worker_gauges == ('{__name__=~"ebb_worker_running|ebb_worker_waiting|ebb_worker_max_batch",'
                               'job=~"ebb|ebb-.+"}')
    assert q.latency.endswith(',job=~"ebb|ebb-.+"}')
    assert q.prefill == 'rate(ebb_worker_prefill_busy_seconds_total{job=~"ebb|ebb-.+"}[4s])'
    assert q.qps == 'sum(rate(ebb_router_requests_total{job=~"ebb|ebb-.+"}[4s]))'
    bare = PromQueries.build(Selector(), "4s")
    assert bare.router_queued == names.ROUTER_QUEUED and bare.worker_scraped == "timestamp(ebb_worker_running)"
    assert bare.worker_gauges == '{__name__=~"ebb_worker_running|ebb_worker_waiting|ebb_worker_max_batch"}'


def test_an_empty_selector_is_unscoped_and_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    client = PrometheusClient("http://127.0.0.1:9")
    with caplog.at_level(logging.WARNING, logger="ebb.sources.prometheus"):
        PrometheusSource(client)
    assert caplog.text == ""
    with caplog.at_level(logging.WARNING, logger="ebb.sources.prometheus"):
        src = PrometheusSource(client, selector="")
    assert "unscoped" in caplog.text and src.queries.router_queued == names.ROUTER_QUEUED


# -- hostile answers ---------------------------------------------------------------------------
def _client(p: HostilePeer, **kw: object) -> PrometheusClient:
    return PrometheusClient(p.url, **kw)  # type: ignore[arg-type]


def test_deep_json_is_an_input_error_not_a_recursion_error(peer: Callable[..., HostilePeer]) -> None:
    p = peer(answer(b"[" * 200_000 + b"]" * 200_000))
    with pytest.raises(InputError, match="nested deeper than 64") as info:
        _client(p).instant("up")
    assert p.url in str(info.value)
    q = peer(answer(b'{"status": "success", "data": ' * 70 + b"1" + b"}" * 70))
    with pytest.raises(InputError, match="nested deeper than 64"):
        _client(q).instant("up")


def test_a_deep_error_body_is_quoted_not_a_recursion_error(peer: Callable[..., HostilePeer]) -> None:
    p = peer(answer(b"[" * 200_000 + b"]" * 200_000, status="400 Bad Request"))
    with pytest.raises(InputError, match="HTTP 400"):
        _client(p).instant("up")


def test_a_huge_answer_is_refused_without_being_read(peer: Callable[..., HostilePeer]) -> None:
    announced = peer(answer(b"", length=150 * 1024 * 1024))
    with pytest.raises(InputError, match="over the"):  # refused from the Content-Length, nothing read
        _client(announced).instant("up")

    p = peer(stream(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
                    b"0," * 32 * 1024, times=64))
    with pytest.raises(InputError, match="more than 1,048,576 bytes"):  # read up to the cap, not the 4 MiB
        _client(p, max_bytes=1024 * 1024).instant("up")


def test_a_short_answer_is_a_transient_outage(peer: Callable[..., HostilePeer]) -> None:
    p = peer(answer(b'{"status": "success"', length=1000))
    with pytest.raises(SourceUnavailable, match="IncompleteRead") as info:
        _client(p).instant("up")
    assert "check that Prometheus runs" in str(info.value)


def test_a_trickled_answer_ends_at_the_deadline(peer: Callable[..., HostilePeer]) -> None:
    sent: list[int] = []
    done = threading.Event()

    def trickle(conn: socket.socket, req: bytes) -> None:  # 40 x 0.1 s, counting what went out
        try:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            for _ in range(40):
                conn.sendall(b" ")
                sent.append(1)
                time.sleep(0.1)
        finally:
            done.set()
    p = peer(trickle)
    with pytest.raises(SourceUnavailable, match="within 0.5 s"):
        _client(p, timeout_s=0.5).range("up", 0, 10, 1)
    assert done.wait(30), "the peer never stopped sending"  # guards a hang only
    assert len(sent) < 40  # the client hung up at its deadline, long before the 4 s trickle ended


def test_one_read_ends_within_its_read_timeout_even_when_every_query_is_slow(peer: Callable[..., HostilePeer]) -> None:
    # Each query answers (in 0.3 s, within the client's 2 s), but seven of them would take 2.1 s.
    def slow(conn: socket.socket, req: bytes) -> None:
        time.sleep(0.3)
        answer(EMPTY)(conn, req)
    fast = peer(answer(EMPTY))
    PrometheusSource(_client(fast), read_timeout_s=1.0).read(time.time() - 30)
    p = peer(slow)
    src = PrometheusSource(_client(p), read_timeout_s=1.0)
    with pytest.raises(SourceUnavailable, match="read_timeout_s"):
        src.read(time.time() - 30)
    assert len(p.requests) < len(fast.requests)  # the read stopped asking once its time was up


@pytest.mark.parametrize("body, why", [
    (_ok("matrix", [{"metric": {}, "values": []}] * (MAX_SERIES + 1)), "50,000"),
    (_ok("matrix", {"not": "a list"}), "not a list"),
    (_ok("matrix", [{"metric": ["x"], "values": []}]), "unreadable matrix"),
    (_ok("matrix", [{"metric": {}, "values": [[1, "2", 3]]}]), "unreadable matrix"),
    (_ok("vector", [{"metric": {}, "value": [1, "1" + "0" * 400]}]), None),   # a float: inf, not an error
    (b'{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, 1'
     + b"0" * 400 + b"]}]}}", "unreadable vector"),                             # an int too big for a float
])
def test_malformed_answers_are_input_errors(peer: Callable[..., HostilePeer], body: bytes, why: str | None) -> None:
    p = peer(answer(body))
    if why is None:
        (s,) = _client(p).instant("up")
        assert s.value[0] == math.inf
        return
    with pytest.raises(InputError, match=re.escape(why)):
        _client(p).instant("up")


def test_warnings_are_logged_at_most_three_times_per_answer(peer: Callable[..., HostilePeer],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    p = peer(answer(_ok("vector", [], warnings=[f"w{i}" * 100 for i in range(10_000)])))
    with caplog.at_level(logging.WARNING, logger="ebb.sources.prometheus"):
        assert _client(p).instant("up") == ()
    assert len(caplog.records) == 4 and "9997 more warnings" in caplog.text


@pytest.mark.parametrize("status, why", [("401 Unauthorized", "--prometheus-token-file"),
                                         ("302 Found", "redirects are not followed")])
def test_a_refusal_or_a_redirect_is_an_input_error(peer: Callable[..., HostilePeer], status: str, why: str) -> None:
    p = peer(answer(b'{"status":"error","errorType":"auth","error":"no token"}', status=status,
                    extra="Location: http://127.0.0.1:1/\r\n"))
    with pytest.raises(InputError, match=re.escape(why)):
        _client(p).instant("up")


def test_every_hostile_answer_leaves_the_source_with_an_ebb_error(peer: Callable[..., HostilePeer]) -> None:
    # What the controller sees: an EbbError (no data this cycle, fail static), never anything else.
    for handler in (answer(b"[" * 100_000), answer(b"", length=10**9), answer(b"{", length=100),
                    answer(b"<html>hi</html>"), answer(b"\xff\xfe\x00"), answer(_ok("string", [1, "x"]))):
        p = peer(handler)
        with pytest.raises(EbbError):
            PrometheusSource(_client(p, timeout_s=0.5)).read(time.time() - 30)


# -- bearer token and TLS ----------------------------------------------------------------------
def _auth(req: bytes) -> str | None:
    for line in req.decode("latin-1").split("\r\n"):
        if line.lower().startswith("authorization:"):
            return line.split(":", 1)[1].strip()
    return None


def test_the_bearer_token_is_sent_and_a_rotated_token_file_is_picked_up(peer: Callable[..., HostilePeer],
                                                                        tmp_path: Path) -> None:
    p = peer(answer(_ok("vector", [])))
    _client(p, token="abc.def").instant("up")
    token = tmp_path / "token"
    token.write_text("first\n")
    client = _client(p, token_file=token)
    client.instant("up")
    token.write_text("second-token\n")
    client.instant("up")
    assert [_auth(r) for r in p.requests] == ["Bearer abc.def", "Bearer first", "Bearer second-token"]
    # The gate probe shares the client: same token, same limits.
    assert prometheus_gate_probe(client)("up") is None
    assert _auth(p.requests[-1]) == "Bearer second-token"


@pytest.mark.parametrize("kw", [{"token": "two words"}, {"token": "abc\r\nX-Evil: 1"}, {"token": ""},
                                {"token": "a", "token_file": "/dev/null"}])
def test_an_unusable_token_is_a_config_error_at_start(kw: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        PrometheusClient("http://127.0.0.1:9", **kw)  # type: ignore[arg-type]


def test_a_missing_token_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="missing-token"):
        PrometheusClient("http://127.0.0.1:9", token_file=tmp_path / "missing-token")


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/", "file:///etc/passwd", "http://127.0.0.1:", "http://u:p@h:9"])
def test_only_http_urls_are_accepted(url: str) -> None:
    with pytest.raises(InputError):
        PrometheusClient(url)


@pytest.mark.skipif(which("openssl") is None, reason="needs the openssl command to make a throwaway certificate")
def test_tls_with_a_ca_works_and_an_unknown_ca_or_plain_http_is_a_permanent_error(
        peer: Callable[..., HostilePeer], tmp_path: Path) -> None:
    crt, key = self_signed(tmp_path, "server")
    other, _ = self_signed(tmp_path, "other")
    p = peer(answer(_ok("vector", [{"metric": {}, "value": [1, "7"]}])), wrap=server_context(crt, key))
    assert prometheus_gate_probe(_client(p, tls=TlsOptions(ca_file=str(crt))))("up") == 7.0
    with pytest.raises(InputError, match="certificate"):
        _client(p, tls=TlsOptions(ca_file=str(other))).instant("up")
    with pytest.raises(InputError, match="cannot load TLS files"):
        _client(p, tls=TlsOptions(ca_file=str(tmp_path / "missing.pem")))
    with pytest.raises(ConfigError, match="https://"):
        PrometheusClient("http://127.0.0.1:9", tls=TlsOptions(ca_file=str(crt)))


# -- the gate probe ----------------------------------------------------------------------------
@pytest.mark.parametrize("result, want", [
    ([{"metric": {}, "value": [1, "+Inf"]}], math.inf),
    ([{"metric": {}, "value": [1, "NaN"]}], None),
    ([{"metric": {"a": "1"}, "value": [1, "1"]}, {"metric": {"a": "2"}, "value": [1, "2"]}], None),
    ([], None),
])
def test_the_gate_probe_reads_one_value_and_inf_is_a_measurement(peer: Callable[..., HostilePeer], result: object,
                                                                 want: float | None) -> None:
    p = peer(answer(_ok("vector", result)))
    assert prometheus_gate_probe(_client(p))("histogram_quantile(0.99, x)") == want


# -- ebb run's flags ---------------------------------------------------------------------------
@pytest.mark.parametrize("args, why", [
    (("--prometheus-selector", 'job="x"} or vector(1)'), "Prometheus selector"),
    (("--prometheus-replica-label", "a-b"), "not a Prometheus label"),
    (("--prometheus-cert", "/etc/hostname"), "go together"),
    (("--prometheus-token-file", "/nonexistent/token"), "cannot read the Prometheus token file"),
])
def test_a_bad_prometheus_flag_is_a_usage_error_before_anything_starts(tmp_path: Path, args: tuple[str, ...],
                                                                        why: str) -> None:
    from typer.testing import CliRunner

    from ebb.cli.main import app
    res = CliRunner().invoke(app, ["run", "--source", "prometheus", "--prometheus-url", "http://127.0.0.1:9",
                                   "--ledger", str(tmp_path / "l.sqlite"), "--cycles", "1", *args])
    assert isinstance(res.exception, EbbError), res.output  # main() prints it as one line and exits 2
    assert why in str(res.exception) and "fix:" in str(res.exception)
    assert not (tmp_path / "l.sqlite").exists()


def test_ebb_run_exits_2_with_one_line_for_a_bad_selector(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "ebb.cli.main", "run", "--source", "prometheus",
                          "--prometheus-url", "http://127.0.0.1:9", "--prometheus-selector", "job=ebb",
                          "--ledger", str(tmp_path / "l.sqlite"), "--cycles", "1"],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "400"})
    assert res.returncode == 2
    assert res.stderr.count("error:") == 1 and "expected a quoted value" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "l.sqlite").exists()


def test_tls_and_token_flags_need_a_prometheus_url() -> None:
    from ebb.cli.run import _prometheus_client
    with pytest.raises(ConfigError, match="need --prometheus-url"):
        _prometheus_client(None, Path("/t"), None, None, None)
    assert _prometheus_client(None, None, None, None, None) is None


def test_the_cli_builds_a_source_with_the_selector_and_label_it_was_given() -> None:
    from ebb.cli.run import _source
    url = "http://127.0.0.1:9"
    src = _source("prometheus", [], url, prometheus_selector='namespace="serving"', replica_label="pod")
    assert isinstance(src, PrometheusSource)
    assert src.queries.router_queued == 'ebb_router_queued{namespace="serving"}' and src.replica_label == "pod"
    assert _source("prometheus", [], url).selector == Selector.parse(DEFAULT_SELECTOR)
    assert _source("prometheus", [], url, prometheus_selector="").selector == Selector()
