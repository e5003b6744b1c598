"""What a model response cost, from a price table per model id.

Prices are USD per million tokens. :data:`DEFAULT_PRICES` covers current OpenAI and Anthropic
models; pass your own table (for example ``{**DEFAULT_PRICES, "openai-compatible:llama3.1":
Price(0, 0)}``) to override or extend it. An unknown model costs ``None``, never a guess.

Lookups accept a journaled model id (``openai:gpt-4.1-mini``,
``openai-compatible:llama3.1@http://localhost:11434/v1``) or the name a provider reports
(``gpt-4.1-mini-2025-04-14``). A table key matches a model name exactly or as the prefix of a
dated snapshot (``-2025-04-14``, ``-20250514``, ``-latest``, ``-0``), never a sibling model:
``gpt-4o`` does not price ``gpt-4o-mini`` or ``gpt-4o-audio-preview``. A key without a
provider prefix matches any provider; ``openai:`` keys do not match ``openai-compatible:``
models, whose servers set their own prices.

:class:`~stead.messages.Usage` counts ``input_tokens`` including the cached part, so the
uncached input is ``input_tokens - cache_read_tokens - cache_write_tokens``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..messages import Usage

__all__ = ["DEFAULT_PRICES", "PRICES_CHECKED", "Price", "cost_usd", "find_price"]


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens. ``cached_input`` (cache reads) and ``cache_write`` default to
    the ``input`` price when the provider has no separate rate."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None


PRICES_CHECKED = "2026-11-29"
"""When :data:`DEFAULT_PRICES` was checked against the providers' published pricing."""

# Checked 2026-11-29 against the OpenAI and Anthropic pricing pages (standard tier, no batch
# discount, no data-residency premium). Anthropic cache writes are the 5-minute rate (1.25x
# input); Sonnet 4/4.5 long-context (>200K input) surcharges are not modelled.
DEFAULT_PRICES: Mapping[str, Price] = MappingProxyType(
    {
        # OpenAI
        "openai:gpt-5": Price(1.25, 10.00, cached_input=0.125),
        "openai:gpt-5-mini": Price(0.25, 2.00, cached_input=0.025),
        "openai:gpt-5-nano": Price(0.05, 0.40, cached_input=0.005),
        "openai:gpt-4.1": Price(2.00, 8.00, cached_input=0.50),
        "openai:gpt-4.1-mini": Price(0.40, 1.60, cached_input=0.10),
        "openai:gpt-4.1-nano": Price(0.10, 0.40, cached_input=0.025),
        "openai:gpt-4o": Price(2.50, 10.00, cached_input=1.25),
        "openai:gpt-4o-mini": Price(0.15, 0.60, cached_input=0.075),
        "openai:o3": Price(2.00, 8.00, cached_input=0.50),
        "openai:o3-mini": Price(1.10, 4.40, cached_input=0.55),
        "openai:o4-mini": Price(1.10, 4.40, cached_input=0.275),
        # Anthropic
        "anthropic:claude-opus-4-6": Price(5.00, 25.00, cached_input=0.50, cache_write=6.25),
        "anthropic:claude-opus-4-5": Price(5.00, 25.00, cached_input=0.50, cache_write=6.25),
        "anthropic:claude-opus-4-1": Price(15.00, 75.00, cached_input=1.50, cache_write=18.75),
        "anthropic:claude-opus-4": Price(15.00, 75.00, cached_input=1.50, cache_write=18.75),
        "anthropic:claude-sonnet-4-6": Price(3.00, 15.00, cached_input=0.30, cache_write=3.75),
        "anthropic:claude-sonnet-4-5": Price(3.00, 15.00, cached_input=0.30, cache_write=3.75),
        "anthropic:claude-sonnet-4": Price(3.00, 15.00, cached_input=0.30, cache_write=3.75),
        "anthropic:claude-3-7-sonnet": Price(3.00, 15.00, cached_input=0.30, cache_write=3.75),
        "anthropic:claude-haiku-4-5": Price(1.00, 5.00, cached_input=0.10, cache_write=1.25),
        "anthropic:claude-3-5-haiku": Price(0.80, 4.00, cached_input=0.08, cache_write=1.00),
    }
)

_PROVIDERS = ("openai-compatible", "openai", "anthropic")
_SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|latest|0)")


def cost_usd(
    model_id: str, usage: Usage, prices: Mapping[str, Price] | None = None
) -> float | None:
    """The USD cost of ``usage`` on ``model_id``, or ``None`` when the model has no price."""
    price = find_price(model_id, prices)
    if price is None:
        return None
    cached = price.input if price.cached_input is None else price.cached_input
    write = price.input if price.cache_write is None else price.cache_write
    uncached = max(usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens, 0)
    total = (
        uncached * price.input
        + usage.cache_read_tokens * cached
        + usage.cache_write_tokens * write
        + usage.output_tokens * price.output
    )
    return total / 1_000_000


def find_price(model_id: str, prices: Mapping[str, Price] | None = None) -> Price | None:
    """The price of ``model_id`` in ``prices`` (default :data:`DEFAULT_PRICES`), or ``None``.

    An exact key wins; otherwise the longest key whose model name matches and whose provider
    (when both name one) is the same.
    """
    if prices is None:
        return _default_price(model_id)
    return _lookup(model_id, prices)


@functools.lru_cache(maxsize=256)
def _default_price(model_id: str) -> Price | None:
    return _lookup(model_id, DEFAULT_PRICES)


def _lookup(model_id: str, table: Mapping[str, Price]) -> Price | None:
    exact = table.get(model_id)
    if exact is not None:
        return exact
    provider, name = _split(model_id)
    best: tuple[int, Price] | None = None
    for key, price in table.items():
        key_provider, key_name = _split(key)
        if key_provider is not None and provider is not None and key_provider != provider:
            continue
        if _matches(name, key_name) and (best is None or len(key_name) > best[0]):
            best = (len(key_name), price)
    return best[1] if best is not None else None


def _split(model_id: str) -> tuple[str | None, str]:
    """``(provider, model name)``: the provider prefix and any ``@base_url`` removed."""
    for provider in _PROVIDERS:
        if model_id.startswith(provider + ":"):
            name = model_id[len(provider) + 1 :]
            if provider == "openai-compatible":
                name = name.partition("@")[0]
            return provider, name
    return None, model_id


def _matches(name: str, key_name: str) -> bool:
    if name == key_name:
        return True
    return name.startswith(key_name) and _SNAPSHOT.fullmatch(name[len(key_name) :]) is not None
