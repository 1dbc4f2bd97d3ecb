"""Dollars: what a provider call cost, from the model's `prices` (USD per million tokens).

    prices = { input = 3, output = 15, cache_read = 0.3, cache_write = 3.75 }

Tokens are counted as each provider reports them (llm_calls keeps them unchanged), and the dialects
differ in one place: Anthropic's `input_tokens` EXCLUDE cache reads and writes, while the OpenAI
dialects' input tokens INCLUDE the cached ones (`cached_tokens` is a part of `prompt_tokens`). So:

    anthropic:        input*P_in + cache_read*P_cr + cache_write*P_cw + output*P_out
    openai_*:         (input - cache_read)*P_in + cache_read*P_cr + cache_write*P_cw + output*P_out

Reasoning tokens are part of the output tokens in every dialect (never billed twice). A missing
`cache_read` / `cache_write` price bills those tokens at the `input` price. Arithmetic is exact
(`Decimal`); a token count the provider did not report counts as 0 (nothing is estimated).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

MILLION = Decimal(1_000_000)
PRICE_KEYS = ("input", "output", "cache_read", "cache_write")
INPUT_INCLUDES_CACHE = frozenset({"openai_chat", "openai_responses"})


@dataclass(frozen=True)
class Prices:
    """USD per million tokens."""

    input: Decimal
    output: Decimal
    cache_read: Decimal | None = None
    cache_write: Decimal | None = None

    @classmethod
    def of(cls, values: dict) -> "Prices":
        def dec(key: str) -> Decimal | None:
            value = values.get(key)
            return None if value is None else Decimal(str(value))

        return cls(dec("input"), dec("output"), dec("cache_read"), dec("cache_write"))  # type: ignore[arg-type]

    def as_dict(self) -> dict:
        return {k: (None if getattr(self, k) is None else float(getattr(self, k))) for k in PRICE_KEYS}


def cost(prices: Prices, kind: str | None, *, input_tokens: int | None = 0, output_tokens: int | None = 0,
         cache_read_tokens: int | None = 0, cache_write_tokens: int | None = 0) -> Decimal:
    """Exact USD of one call (or of summed calls of one model: the formula is linear)."""
    inp, out = input_tokens or 0, output_tokens or 0
    read, write = cache_read_tokens or 0, cache_write_tokens or 0
    uncached = max(inp - read, 0) if kind in INPUT_INCLUDES_CACHE else inp
    read_price = prices.input if prices.cache_read is None else prices.cache_read
    write_price = prices.input if prices.cache_write is None else prices.cache_write
    total = uncached * prices.input + read * read_price + write * write_price + out * prices.output
    return total / MILLION


def usd(amount: Decimal | None) -> str:
    """`$12.34`; amounts under a dollar keep four decimals (`$0.0034`), so small calls do not read 0."""
    if amount is None:
        return "-"
    if amount >= 1:
        return f"${amount.quantize(Decimal('0.01'), ROUND_HALF_UP):,}"
    return f"${amount.quantize(Decimal('0.0001'), ROUND_HALF_UP)}"
