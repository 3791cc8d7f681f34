"""The price table: every SDK-named model priced or knowingly unpriced, cache tokens at their own prices,
settings entries over the table, and no price invented for a model nobody priced."""

import json

import pytest

from drivetrain import pricing
from drivetrain.errors import ConfigError
from drivetrain.messages import Usage
from drivetrain.pricing import Price, context_window, cost_usd, prices_from_settings, sdk_models, set_prices


@pytest.fixture(autouse=True)
def _no_settings():
    set_prices({})
    yield
    set_prices({})


def test_every_sdk_model_is_priced_or_listed_as_unpriced():
    names = sdk_models()
    # the SDKs' literals were found at all (which ones changes with their releases: anthropic 2.15 dropped
    # claude-sonnet-4-5)
    assert any(n.startswith("claude-") for n in names) and any(n.startswith("gpt-") for n in names)
    neither = sorted(n for n in names if pricing.price(n) is None and n not in pricing.UNPRICED)
    assert not neither, f"the installed SDKs name models the price table does not know: {neither}"
    both = sorted(n for n in pricing.UNPRICED if pricing.price(n) is not None)
    assert not both, f"listed as unpriced but priced (a dated name matched its alias?): {both}"
    assert not pricing.UNPRICED - names, "UNPRICED names a model the SDKs no longer name: drop it"


def test_every_priced_model_has_all_four_prices_and_a_window():
    for name, p in pricing.PRICES.items():
        assert p.priced and p.context_window and p.context_window >= 8_192, name
        assert p.cache_read <= p.input <= p.cache_write and p.output >= p.input, name


def test_unpriced_sdk_models_report_a_null_cost_not_zero():
    usage = Usage(1000, 100, 0, 0)
    for name in sorted(pricing.UNPRICED):
        assert cost_usd(name, usage) is None, name
    assert cost_usd("my-own-model", usage) is None and context_window("my-own-model") is None


def test_cache_writes_and_reads_cost_their_own_prices():
    # claude-sonnet-4-5: input 3, output 15, cache write 3.75, cache read 0.30 USD per million tokens
    assert cost_usd("claude-sonnet-4-5", Usage(1_000_000, 0, 0, 0)) == 3.0
    assert cost_usd("claude-sonnet-4-5", Usage(0, 1_000_000, 0, 0)) == 15.0
    assert cost_usd("claude-sonnet-4-5", Usage(0, 0, 1_000_000, 0)) == 3.75
    assert cost_usd("claude-sonnet-4-5", Usage(0, 0, 0, 1_000_000)) == 0.30
    assert cost_usd("claude-sonnet-4-5", Usage(1234, 87, 2000, 5000)) == pytest.approx(
        (1234 * 3 + 87 * 15 + 2000 * 3.75 + 5000 * 0.30) / 1e6
    )
    # OpenAI: cached input at its discount, no write premium
    assert cost_usd("gpt-4o", Usage(0, 0, 0, 1_000_000)) == 1.25
    assert cost_usd("gpt-4o", Usage(0, 0, 1_000_000, 0)) == 2.5


def test_names_match_exactly_or_as_a_dated_snapshot():
    assert cost_usd("gpt-4.1-nano", Usage(1_000_000)) == 0.10  # not gpt-4.1's 2.0, as a prefix match would give
    assert cost_usd("gpt-4o-2024-05-13", Usage(1_000_000)) == 5.0  # a snapshot priced on its own
    assert cost_usd("gpt-4o-2024-08-06", Usage(1_000_000)) == 2.5
    assert cost_usd("claude-haiku-4-5-20991231", Usage(1_000_000)) == 1.0  # a future snapshot of a priced alias
    assert cost_usd("claude-opus-4-8", Usage(1_000_000)) is None  # not claude-opus-4's price
    assert cost_usd("gpt-4o-audio-preview-2024-12-17", Usage(1_000_000)) is None
    assert cost_usd("local/qwen", Usage(10**6, 10**6)) == 0.0
    assert context_window("claude-sonnet-4-5") == 200_000 and context_window("gpt-4.1") == 1_047_576


def test_settings_add_and_override_prices(tmp_path):
    user, project = tmp_path / "user.json", tmp_path / "project.json"
    files = [  # most specific first, as Settings.raw holds them
        (project, {"pricing": {"my-model": {"output": 4.0}, "claude-sonnet-4-5": {"context_window": 1_000_000}}}),
        (
            user,
            {
                "pricing": {
                    "my-model": {
                        "input": 1.0,
                        "output": 2.0,
                        "cache_write": 1.25,
                        "cache_read": 0.1,
                        "context_window": 32_000,
                    },
                    "claude-opus-4-8": {"context_window": 500_000},
                }
            },
        ),
    ]
    set_prices(prices_from_settings(files))
    assert cost_usd("my-model", Usage(1_000_000, 1_000_000, 1_000_000, 1_000_000)) == 1.0 + 4.0 + 1.25 + 0.1
    assert context_window("my-model") == 32_000
    assert context_window("claude-sonnet-4-5") == 1_000_000
    assert cost_usd("claude-sonnet-4-5", Usage(1_000_000)) == 3.0  # the table's prices kept
    assert context_window("claude-opus-4-8") == 500_000 and cost_usd("claude-opus-4-8", Usage(1)) is None
    set_prices({})
    assert cost_usd("my-model", Usage(1)) is None


@pytest.mark.parametrize(
    "section, message",
    [
        ({"m": {"input": 1.0, "output": 2.0}}, "lacks cache_write, cache_read"),
        ({"m": {"input": -1}}, "number ≥ 0"),
        ({"m": {"input": "3"}}, "number ≥ 0"),
        ({"m": {"context_window": 0}}, "positive integer"),
        ({"m": {"inputs": 1}}, "keys among"),
        ([], '"pricing" must be an object'),
    ],
)
def test_malformed_pricing_settings_name_the_file(tmp_path, section, message):
    path = tmp_path / "settings.json"
    with pytest.raises(ConfigError, match=message) as e:
        prices_from_settings([(path, {"pricing": section})])
    assert str(path) in str(e.value) or "settings files" in str(e.value)


def test_cli_takes_prices_from_the_settings_files(tmp_path):
    from drivetrain.testing import ScriptedServer, reply
    from test_cli import cli

    (tmp_path / ".drivetrain").mkdir()
    (tmp_path / ".drivetrain" / "settings.json").write_text(
        json.dumps({"pricing": {"my-own-model": {"input": 2.0, "output": 10.0, "cache_write": 2.5, "cache_read": 0.2}}})
    )
    usage = {
        "input_tokens": 1000,
        "output_tokens": 100,
        "cache_creation_input_tokens": 2000,
        "cache_read_input_tokens": 3000,
    }
    with ScriptedServer([reply("hello", usage=usage)]) as server:
        proc = cli(server.url, "-p", "hi", "--output-format", "json", "--model", "my-own-model", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    expected = (1000 * 2 + 100 * 10 + 2000 * 2.5 + 3000 * 0.2) / 1e6
    assert json.loads(proc.stdout)["total_cost_usd"] == pytest.approx(expected)
    assert Price(1.0, 1.0, 1.0, 1.0).priced and not Price(context_window=5).priced
