"""Password hashes, the users file, the brake on failed logins and the rule for open listeners."""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
from pathlib import Path

import pytest

from hermes.config import load_settings
from hermes.errors import StartupError, TooManyFailedLogins, UsageError
from hermes.runtime import Hermes, Role
from hermes.security.accounts import change_users
from hermes.security.authenticator import Authenticator, Principal
from hermes.security.passwords import VerifiedCache, hash_password, verify_password
from hermes.security.setup import Security, is_loopback
from hermes.security.throttle import FailedLogins
from hermes.security.users import ADMIN, User, UserStore

pytestmark = pytest.mark.unit


def test_a_password_hash_is_salted_scrypt_and_checks_only_its_password() -> None:
    first, second = hash_password("correct horse"), hash_password("correct horse")
    assert first.startswith("scrypt$131072$8$1$") and first != second  # a fresh salt each time
    assert "correct horse" not in first
    assert verify_password("correct horse", first) and verify_password("correct horse", second)
    assert not verify_password("correct horsf", first)
    assert not verify_password("correct horse", "scrypt$damaged")


def test_the_verified_cache_knows_only_what_it_was_told() -> None:
    cache = VerifiedCache(ttl=60)
    assert not cache.known("alice", "hash", "pw")
    cache.remember("alice", "hash", "pw")
    assert cache.known("alice", "hash", "pw")
    assert not cache.known("alice", "hash", "other") and not cache.known("alice", "new hash", "pw")


def test_failed_logins_brake_one_client_until_its_window_ends() -> None:
    failures = FailedLogins(limit=2, window=0.2)
    failures.failed("10.0.0.1", "alice")
    failures.check("10.0.0.1")
    failures.failed("10.0.0.1", "alice")
    with pytest.raises(TooManyFailedLogins):
        failures.check("10.0.0.1")
    failures.check("10.0.0.2")


def test_attempts_in_flight_count_once_per_distinct_credential() -> None:
    failures = FailedLogins(limit=2)
    with failures.attempt("10.0.0.1", b"a"), failures.attempt("10.0.0.1", b"a"):
        failures.check("10.0.0.1")  # the same credential twice is one attempt
        with failures.attempt("10.0.0.1", b"b"), pytest.raises(TooManyFailedLogins):
            failures.check("10.0.0.1")
        failures.check("10.0.0.2")
    failures.check("10.0.0.1")  # done, none failed


def test_the_users_file_is_private_and_reread_when_it_changes(tmp_path: Path) -> None:
    writer, reader = UserStore.in_data_dir(tmp_path), UserStore.in_data_dir(tmp_path)
    reader.recheck = 0
    assert reader.users() == {}
    writer.save(User("alice", "h", frozenset({ADMIN}), frozenset({"team-a"})))
    assert reader.get("alice") == User("alice", "h", frozenset({ADMIN}), frozenset({"team-a"}))
    assert writer.path.stat().st_mode & 0o777 == 0o600
    assert writer.remove("alice") and not writer.remove("alice")
    assert reader.get("alice") is None
    writer.path.write_text("{not json")
    with pytest.raises(UsageError, match="damaged"):
        reader.users()


def _args(action: str, name: str | None = None, **flags: object) -> argparse.Namespace:
    values = {"admin": None, "owner": None, "password_stdin": False, "no_password": False, **flags}
    return argparse.Namespace(action=action, name=name, **values)


def test_hermes_users_adds_changes_lists_and_removes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("a long enough password\n"))
    assert list(change_users(tmp_path, _args("add", "root", admin=True, password_stdin=True))) == ["added root"]
    list(change_users(tmp_path, _args("add", "bot", owner=["team-a"], no_password=True)))
    list(change_users(tmp_path, _args("set", "bot", owner=["team-a", "team-b"])))
    assert list(change_users(tmp_path, _args("list"))) == [
        "bot\troles=-\towners=team-a,team-b\tbearer token only",
        "root\troles=admin\towners=-\tpassword",
    ]
    with pytest.raises(UsageError, match="exists already"):
        list(change_users(tmp_path, _args("add", "root", no_password=True)))
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    with pytest.raises(UsageError, match="12 characters"):
        list(change_users(tmp_path, _args("add", "new", password_stdin=True)))
    assert list(change_users(tmp_path, _args("remove", "bot"))) == ["removed bot"]


def test_an_open_listener_may_only_be_on_loopback(tmp_path: Path) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("example.com")
    open_ = Security.from_settings(load_settings({"data_dir": tmp_path}))
    assert open_.authenticator is None and "OFF" in open_.describe()
    open_.check_listener("127.0.0.1", "management")
    with pytest.raises(StartupError, match="without authentication"):
        open_.check_listener("0.0.0.0", "management")
    UserStore.in_data_dir(tmp_path).save(User("root", hash_password("x" * 12), frozenset({ADMIN})))
    secured = Security.from_settings(load_settings({"data_dir": tmp_path}))
    secured.check_listener("0.0.0.0", "management")
    assert secured.describe().startswith("Basic")


def test_consumers_alone_refuse_to_listen_beyond_loopback_without_authentication(tmp_path: Path) -> None:
    settings = load_settings({"data_dir": tmp_path, "host": "0.0.0.0", "kafka_bootstrap_servers": "127.0.0.1:9"})
    with pytest.raises(StartupError, match=r"the consumers would listen on \S+ without authentication"):
        asyncio.run(Hermes(settings, frozenset({Role.CONSUMERS})).start())


def test_concurrent_requests_with_one_credential_do_not_each_pay_for_scrypt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = UserStore.in_data_dir(tmp_path)
    store.save(User("pub", hash_password("publisher-password")))
    authenticator = Authenticator(store, None, FailedLogins())
    checks = []

    def counted(password: str, encoded: str) -> bool:
        checks.append(password)
        return verify_password(password, encoded)

    monkeypatch.setattr("hermes.security.authenticator.verify_password", counted)
    header = "Basic " + base64.b64encode(b"pub:publisher-password").decode()
    assert authenticator.known(header) is None  # not verified yet: it must be checked

    async def burst() -> list[Principal]:
        return await asyncio.gather(*(authenticator.authenticate(header, "127.0.0.1") for _ in range(20)))

    assert {principal.name for principal in asyncio.run(burst())} == {"pub"}
    assert len(checks) == 1  # one check at a time per address: the others find it verified once it is done
    known = authenticator.known(header)
    assert known is not None and known.name == "pub"
    assert authenticator.known("Basic " + base64.b64encode(b"pub:wrong-password").decode()) is None


def test_a_caller_nobody_authenticated_is_no_admin_and_an_open_one_has_not_signed_in() -> None:
    from aiohttp.test_utils import make_mocked_request

    from hermes.management.access import principal
    from hermes.security.authenticator import OPEN

    caller = principal(make_mocked_request("GET", "/status/health"))  # a public route with authentication on
    assert not caller.is_admin and not caller.signed_in
    assert OPEN.is_admin and not OPEN.signed_in  # read-only mode holds for it (docs/security.md)


def test_a_status_port_serves_metrics_to_authenticated_scrapes_only(tmp_path: Path) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from hermes.http.status import status_app
    from hermes.security.scrape import scrape_guard

    UserStore.in_data_dir(tmp_path).save(User("prometheus", hash_password("scrape-password-1")))
    security = Security.from_settings(load_settings({"data_dir": tmp_path}))
    right = "Basic " + base64.b64encode(b"prometheus:scrape-password-1").decode()

    async def scrape() -> list[int]:
        async with TestClient(TestServer(status_app(scrape_guard(security)))) as client:
            statuses = [(await client.get("/status/health")).status]
            for headers in ({}, {"Authorization": right}):
                statuses.append((await client.get("/status/prometheus", headers=headers)).status)
            return statuses

    assert asyncio.run(scrape()) == [200, 401, 200]
    assert scrape_guard(Security.from_settings(load_settings({"data_dir": tmp_path / "open"}))) is None
