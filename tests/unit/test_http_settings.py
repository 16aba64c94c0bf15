"""The HTTP settings (`RUNLANE_HTTP_*`): where to listen, and each bad value refused in one line
that names the variable."""

from __future__ import annotations

import pytest

from runlane.api.server import parse_http_addr
from runlane.errors import ConfigError
from runlane.service.config import Settings


@pytest.mark.parametrize(
    ("text", "listen"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("  off ", None),
        ("OFF", None),
        (":8080", ("0.0.0.0", 8080)),  # every interface, as a container needs
        ("[::1]:9000", ("::1", 9000)),
        ("[::]:80", ("::", 80)),
        ("localhost:0", ("localhost", 0)),  # the system picks the port
        ("runlane.internal:65535", ("runlane.internal", 65535)),
    ],
)
def test_addresses(text: str, listen: tuple[str, int] | None) -> None:
    assert parse_http_addr(text) == listen


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("8080", "expected HOST:PORT"),
        ("127.0.0.1:", "expected HOST:PORT"),
        ("", "expected HOST:PORT"),
        ("127.0.0.1:65536", "the port must be from 0 to 65535"),
        ("127.0.0.1:99999999", "the port '99999999' is not a number"),
        ("127.0.0.1:-1", "the port '-1' is not a number"),
        ("127.0.0.1:http", "the port 'http' is not a number"),
        ("::1:8080", "write an IPv6 address in brackets"),
        ("[not-v6]:8080", "'not-v6' is not an IPv6 address"),
        ("http://host:8080", "is not a host name or address"),
    ],
)
def test_bad_addresses_are_one_line(text: str, why: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_http_addr(text)
    assert caught.value.message.startswith(f"RUNLANE_HTTP_ADDR={text!r}: ")
    assert why in caught.value.message


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.http_listen == ("127.0.0.1", 8080)  # loopback until chosen on purpose
    assert settings.http_request_timeout == 30.0
    assert settings.http_cors_origins == settings.http_trusted_proxies == ()
    assert (settings.http_user_header, settings.http_groups_header) == (
        "X-Forwarded-User",
        "X-Forwarded-Groups",
    )
    assert settings.http_group_roles == ()


def test_every_http_setting_is_read() -> None:
    settings = Settings.from_env(
        {
            "RUNLANE_HTTP_ADDR": "off",
            "RUNLANE_HTTP_REQUEST_TIMEOUT": "5s",
            "RUNLANE_HTTP_CORS_ORIGINS": "https://ui.example.com, http://localhost:3000",
            "RUNLANE_HTTP_TRUSTED_PROXIES": "10.0.0.0/8,::1, 192.168.1.7",
            "RUNLANE_HTTP_USER_HEADER": "X-Auth-Request-User",
            "RUNLANE_HTTP_GROUPS_HEADER": "X-Auth-Request-Groups",
            "RUNLANE_HTTP_GROUP_ROLES": "ops=operator, sre=ADMIN,,readers=viewer",
        }
    )
    assert settings.http_listen is None
    assert settings.http_request_timeout == 5.0
    assert settings.http_cors_origins == ("https://ui.example.com", "http://localhost:3000")
    assert settings.http_trusted_proxies == ("10.0.0.0/8", "::1", "192.168.1.7")
    assert settings.http_user_header == "X-Auth-Request-User"
    assert settings.http_group_roles == (
        ("ops", "operator"),
        ("sre", "admin"),
        ("readers", "viewer"),
    )
    public = settings.public()  # `runlane config --json`
    assert public["http_group_roles"] == {"ops": "operator", "sre": "admin", "readers": "viewer"}
    assert public["http_trusted_proxies"] == ["10.0.0.0/8", "::1", "192.168.1.7"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RUNLANE_HTTP_ADDR": "nowhere"}, "RUNLANE_HTTP_ADDR='nowhere': expected HOST:PORT"),
        (
            {"RUNLANE_HTTP_TRUSTED_PROXIES": "10.0.0.0/33"},
            "RUNLANE_HTTP_TRUSTED_PROXIES: '10.0.0.0/33' is not an IP address or network",
        ),
        (
            {"RUNLANE_HTTP_TRUSTED_PROXIES": "proxy.local"},
            "RUNLANE_HTTP_TRUSTED_PROXIES: 'proxy.local' is not an IP address or network",
        ),
        (
            {"RUNLANE_HTTP_GROUP_ROLES": "ops"},
            "RUNLANE_HTTP_GROUP_ROLES: 'ops': expected GROUP=ROLE (ops=operator)",
        ),
        (
            {"RUNLANE_HTTP_GROUP_ROLES": "ops=root"},
            "RUNLANE_HTTP_GROUP_ROLES: 'ops=root': the role must be viewer, operator or admin",
        ),
        (
            {"RUNLANE_HTTP_GROUP_ROLES": "=admin"},
            "RUNLANE_HTTP_GROUP_ROLES: '=admin': expected GROUP=ROLE",
        ),
        (
            {"RUNLANE_HTTP_USER_HEADER": "X User"},
            "RUNLANE_HTTP_USER_HEADER='X User': not an HTTP header name",
        ),
        (
            {"RUNLANE_HTTP_CORS_ORIGINS": "ui.example.com"},
            "RUNLANE_HTTP_CORS_ORIGINS: 'ui.example.com' is not an origin",
        ),
        (
            {"RUNLANE_HTTP_CORS_ORIGINS": "https://ui.example.com/app"},
            "is not an origin",
        ),
        (
            {"RUNLANE_HTTP_REQUEST_TIMEOUT": "2h"},
            "RUNLANE_HTTP_REQUEST_TIMEOUT='2h': must be at most 1h",
        ),
        ({"RUNLANE_HTTP_REQUEST_TIMEOUT": "0s"}, "must be greater than zero"),
    ],
)
def test_bad_settings_are_one_line(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env(env)
    assert message in caught.value.message
    assert "\n" not in caught.value.message
