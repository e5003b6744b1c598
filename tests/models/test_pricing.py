"""Cost of a response from the price table: lookups by model id and provider-reported name."""

from __future__ import annotations

import pytest

from stead.messages import Usage
from stead.models.pricing import DEFAULT_PRICES, Price, cost_usd, find_price

MILLION = 1_000_000


@pytest.mark.parametrize(
    ("model_id", "expected"),
    [
        ("openai:gpt-4.1-mini", Price(0.40, 1.60, cached_input=0.10)),
        ("gpt-4.1-mini", Price(0.40, 1.60, cached_input=0.10)),
        ("gpt-4.1-mini-2025-04-14", Price(0.40, 1.60, cached_input=0.10)),
        ("openai:gpt-4.1-2025-04-14", Price(2.00, 8.00, cached_input=0.50)),
        ("gpt-4o-mini-2024-07-18", Price(0.15, 0.60, cached_input=0.075)),
        ("o4-mini-2025-04-16", Price(1.10, 4.40, cached_input=0.275)),
        (
            "anthropic:claude-sonnet-4-20250514",
            Price(3.00, 15.00, cached_input=0.30, cache_write=3.75),
        ),
        ("claude-opus-4-0", Price(15.00, 75.00, cached_input=1.50, cache_write=18.75)),
        ("claude-opus-4-1-20250805", Price(15.00, 75.00, cached_input=1.50, cache_write=18.75)),
        ("claude-3-5-haiku-latest", Price(0.80, 4.00, cached_input=0.08, cache_write=1.00)),
        ("claude-sonnet-4-5-20250929", Price(3.00, 15.00, cached_input=0.30, cache_write=3.75)),
    ],
)
def test_known_models_and_their_dated_snapshots_are_priced(model_id: str, expected: Price) -> None:
    assert find_price(model_id) == expected


@pytest.mark.parametrize(
    "model_id",
    [
        "gpt-4o-audio-preview",  # a sibling of gpt-4o, not a snapshot of it
        "gpt-4.1-mini-realtime",
        "o3-pro",
        "claude-opus-4-7",  # not in the table: unknown, not Opus 4 prices
        "mistral-large",
        "openai-compatible:gpt-4.1@http://localhost:8000/v1",  # the server sets its own prices
        "anthropic:gpt-4.1",  # an openai: key does not price another provider's model
    ],
)
def test_unknown_models_have_no_price(model_id: str) -> None:
    assert find_price(model_id) is None
    assert cost_usd(model_id, Usage(input_tokens=1000, output_tokens=10)) is None


def test_openai_cost_bills_cached_input_at_the_cached_rate() -> None:
    # OpenAI reports prompt tokens including the cached ones.
    usage = Usage(input_tokens=3 * MILLION, output_tokens=MILLION, cache_read_tokens=MILLION)

    cost = cost_usd("openai:gpt-4.1-mini", usage)

    assert cost == pytest.approx(2 * 0.40 + 1 * 0.10 + 1 * 1.60)


def test_anthropic_cost_bills_cache_reads_and_writes_at_their_rates() -> None:
    usage = Usage(
        input_tokens=1000 + 2000 + 4000,
        output_tokens=500,
        cache_read_tokens=2000,
        cache_write_tokens=4000,
    )

    cost = cost_usd("anthropic:claude-sonnet-4-20250514", usage)

    expected = (1000 * 3.00 + 2000 * 0.30 + 4000 * 3.75 + 500 * 15.00) / MILLION
    assert cost == pytest.approx(expected)


def test_missing_cache_rates_fall_back_to_the_input_price() -> None:
    prices = {"my-model": Price(input=1.0, output=2.0)}
    usage = Usage(
        input_tokens=300, output_tokens=100, cache_read_tokens=100, cache_write_tokens=100
    )

    assert cost_usd("my-model", usage, prices) == pytest.approx((300 * 1.0 + 100 * 2.0) / MILLION)


def test_a_user_table_replaces_the_default_one() -> None:
    local = "openai-compatible:llama3.1:8b@http://localhost:11434/v1"
    prices = {
        **DEFAULT_PRICES,
        "openai-compatible:llama3.1:8b": Price(0.0, 0.0),
        "openai:gpt-4.1-mini": Price(1.0, 1.0),
    }

    assert cost_usd(local, Usage(input_tokens=10**6, output_tokens=10**6), prices) == 0.0
    assert find_price("gpt-4.1-mini-2025-04-14", prices) == Price(1.0, 1.0)
    assert find_price("gpt-4.1-mini", {"something-else": Price(1, 1)}) is None


def test_the_most_specific_key_wins() -> None:
    prices = {"openai:gpt-4.1": Price(2.0, 8.0), "gpt-4.1-2025-04-14": Price(9.0, 9.0)}

    assert find_price("gpt-4.1-2025-04-14", prices) == Price(9.0, 9.0)
    assert find_price("openai:gpt-4.1-2025-04-14", prices) == Price(9.0, 9.0)
    assert find_price("openai:gpt-4.1-2025-06-01", prices) == Price(2.0, 8.0)


def test_zero_usage_costs_nothing() -> None:
    assert cost_usd("openai:gpt-4o", Usage()) == 0.0


def test_default_table_cannot_be_mutated() -> None:
    with pytest.raises(TypeError):
        DEFAULT_PRICES["openai:gpt-4o"] = Price(0, 0)  # type: ignore[index]
