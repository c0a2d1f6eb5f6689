"""The pipeline's data rules: how synthetic orders are made (plain Python, deterministic per
chunk, so a rerun writes the same chunk) and how one raw order is cleaned and enriched (plain
Python, run on the Spark executors)."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta
from typing import Any

# Deliberately messy: mixed case, padding, aliases, unknown codes, bad amounts, two date forms.
RAW_COUNTRIES = (" de", "DE", "fr ", "FR", "us", "USA", "gb", "UK", "Deu", "it", "", "XX")
RAW_CURRENCIES = ("EUR", "usd", "GBP", "EUR", "chf")
FIRST_DAY = date(2026, 1, 1)

COUNTRY_ALIASES = {"UK": "GB", "DEU": "DE", "USA": "US"}
REGIONS = {"DE": "EU", "FR": "EU", "IT": "EU", "GB": "UK", "US": "NA"}
TO_EUR = {"EUR": 1.0, "USD": 0.92, "GBP": 1.17}


def synthetic_orders(first: int, count: int, seed: int) -> list[dict[str, Any]]:
    """Orders `first` .. `first + count - 1`; the same list for the same arguments."""
    rng = random.Random(seed)
    return [synthetic_order(order_id, rng.random()) for order_id in range(first, first + count)]


def synthetic_order(order_id: int, draw: float) -> dict[str, Any]:
    """One raw order, as a careless upstream system would send it (`draw` in [0, 1))."""
    day = FIRST_DAY + timedelta(days=order_id % 365)
    amount = None if order_id % 97 == 0 else -1.0 if order_id % 89 == 0 else round(draw * 250, 2)
    return {
        "order_id": order_id,
        "customer": f"C{order_id * 7919 % 5000:05d}",
        "country": RAW_COUNTRIES[order_id * 31 % len(RAW_COUNTRIES)],
        "amount": amount,
        "currency": RAW_CURRENCIES[order_id % len(RAW_CURRENCIES)],
        "ordered_on": day.strftime("%Y-%m-%d" if order_id % 2 == 0 else "%d/%m/%Y"),
    }


def clean_order(raw: dict[str, Any]) -> dict[str, Any] | None:
    """One order cleaned and enriched, or None when it cannot be trusted."""
    country = COUNTRY_ALIASES.get(c := str(raw.get("country") or "").strip().upper(), c)
    currency = str(raw.get("currency") or "").strip().upper()
    amount = raw.get("amount")
    if country not in REGIONS or currency not in TO_EUR or amount is None or amount <= 0:
        return None
    ordered = parse_day(str(raw.get("ordered_on") or ""))
    if ordered is None:
        return None
    eur = round(float(amount) * TO_EUR[currency], 2)
    return {
        "order_id": raw["order_id"],
        "customer": raw["customer"],
        "country": country,
        "region": REGIONS[country],
        "month": ordered.strftime("%Y-%m"),
        "amount_eur": eur,
        "size": "small" if eur < 20 else "medium" if eur < 100 else "large",
    }


def parse_day(text: str) -> date | None:
    for form in ("%Y-%m-%d", "%d/%m/%Y"):
        try:
            return datetime.strptime(text, form).date()
        except ValueError:
            continue
    return None
