"""Network allow lists as settings data: what ``allow=HOST[:PORT],…`` accepts (normalized) and
refuses (naming the entry), and when one list lies within another (a server's limit)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from treadle.data.mcp import MCPServerConfig
from treadle.data.network import AllowList, NetworkChoiceError, network_looser, normalize_host
from treadle.data.settings import SandboxSettings
from treadle.runtime.settings import HostAllows, SandboxRefused, SettingsPolicy


def test_a_list_is_normalized_and_kept_as_settings_store_it() -> None:
    sandbox = SandboxSettings(
        network="allow=PyPI.org.,*.Example.com, 10.0.0.5 ,[::1]:8080,pypi.org"
    )
    assert sandbox.network == "allow=pypi.org,*.example.com,10.0.0.5,[::1]:8080"
    again = SandboxSettings.model_validate_json(sandbox.model_dump_json())
    assert again == sandbox
    assert SandboxSettings(network="on").network == "on"


@pytest.mark.parametrize(
    ("network", "said"),
    [
        ("allow=", "at least one host"),
        ("allow=127.0.0.1", "name the port to allow"),
        ("allow=localhost", "name the port to allow"),
        ("allow=[::1]", "name the port to allow"),
        ("allow=169.254.169.254", "name the port to allow"),
        ("allow=0.0.0.0:80", "not a host one can connect to"),
        ("allow=*.com", "too wide"),
        ("allow=a.*.example.com", "a wildcard only as the first label"),
        ("allow=127.1:80", "not a valid name"),
        ("allow=2130706433:80", "not a valid name"),
        ("allow=host:0", "the port must be a number from 1 to 65535"),
        ("allow=host:65536", "the port must be a number from 1 to 65535"),
        ("allow=host:８０", "the port must be a number from 1 to 65535"),
        ("allow=user@host", "not a valid name"),
        ("allow=ho\x1bst", "'ho\\x1bst'"),
        ("allow=" + ",".join(f"h{n}.example.com" for n in range(65)), "at most 64"),
        ("sometimes", "give off, on or allow="),
    ],
)
def test_unusable_lists_are_refused_naming_the_entry(network: str, said: str) -> None:
    with pytest.raises(ValidationError) as refused:
        SandboxSettings(network=network)
    assert said in str(refused.value)


def test_an_allow_list_needs_a_sandbox() -> None:
    with pytest.raises(ValidationError, match="applies to a sandbox only"):
        SandboxSettings(kind="none", network="allow=pypi.org")


def test_matching_names_wildcards_addresses_and_ports() -> None:
    allow = AllowList.parse("allow=pypi.org,*.example.com,10.0.0.5:8443,localhost:8080")
    assert allow.rule_for(*normalize_host("PyPI.org"), 443) is not None
    assert allow.rule_for(*normalize_host("pypi.org"), 80) is not None
    assert allow.rule_for(*normalize_host("pypi.org"), 22) is None  # 443 and 80 only
    assert allow.rule_for(*normalize_host("a.b.example.com"), 443) is not None
    assert allow.rule_for(*normalize_host("example.com"), 443) is None  # below it only
    assert allow.rule_for(*normalize_host("badexample.com"), 443) is None
    assert allow.rule_for(*normalize_host("10.0.0.5"), 8443) is not None
    assert allow.rule_for(*normalize_host("10.0.0.5"), 443) is None
    assert allow.rule_for(*normalize_host("127.0.0.1"), 8080) is None  # named as localhost


@pytest.mark.parametrize(
    ("mine", "limit", "refused"),
    [
        ("allow=a.example.com", "allow=*.example.com", None),
        ("allow=*.a.example.com", "allow=*.example.com", None),
        ("allow=x.org:443", "allow=x.org", None),
        ("off", "allow=x.org", None),
        ("allow=x.org", "on", None),
        ("allow=example.com", "allow=*.example.com", "example.com"),
        ("allow=*.example.com", "allow=*.a.example.com", "*.example.com"),
        ("allow=x.org", "allow=x.org:443", "x.org"),
        ("allow=x.org,evil.org", "allow=x.org", "evil.org"),
        ("on", "allow=x.org", "network on"),
        ("allow=x.org", "off", "network allow=x.org (the limit is off)"),
    ],
)
def test_a_list_within_a_limit(mine: str, limit: str, refused: str | None) -> None:
    said = network_looser(mine, limit)
    if refused is None:
        assert said is None
    else:
        assert said is not None
        assert refused in said


def test_a_server_refuses_a_wider_list_naming_the_host() -> None:
    policy = SettingsPolicy(
        allows=HostAllows(
            trusted=False,
            sandbox_limit=SandboxSettings(network="allow=*.example.com,10.0.0.5:8443"),
        )
    )
    policy.allows.check_sandbox(SandboxSettings(network="allow=api.example.com,10.0.0.5:8443"))
    with pytest.raises(SandboxRefused) as refused:
        policy.allows.check_sandbox(SandboxSettings(network="allow=api.example.com,evil.org:443"))
    assert "evil.org:443" in str(refused.value)
    assert "allow=*.example.com,10.0.0.5:8443" in str(refused.value)
    assert "api.example.com" not in str(refused.value).split("(")[0]


def test_an_mcp_entry_takes_an_allow_list_beside_true() -> None:
    entry = {"command": "/bin/true"}
    assert MCPServerConfig.model_validate({**entry, "network": True}).network_choice == "on"
    assert MCPServerConfig.model_validate(entry).network_choice == "off"
    listed = MCPServerConfig.model_validate({**entry, "network": "allow=API.example.com"})
    assert listed.network == listed.network_choice == "allow=api.example.com"
    with pytest.raises(ValidationError, match="name the port to allow"):
        MCPServerConfig.model_validate({**entry, "network": "allow=127.0.0.1"})
    with pytest.raises(ValidationError, match="apply to a stdio server only"):
        MCPServerConfig.model_validate({"url": "https://x.example", "network": "allow=x.org"})


def test_the_parser_refuses_before_any_lookup() -> None:
    with pytest.raises(NetworkChoiceError):
        AllowList.parse("allow=a..b")
