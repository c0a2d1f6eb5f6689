"""The pipeline's data rules: how synthetic orders are made (Spark SQL, on the JVM) and how
one raw order is cleaned and enriched (plain Python, run on the Spark executors)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

# Deliberately messy: mixed case, padding, aliases, unknown codes, bad amounts, two date forms.
SYNTHETIC_ORDERS = (
    "id AS order_id",
    "concat('C', lpad(cast(id * 7919 % 5000 AS string), 5, '0')) AS customer",
    "element_at(array(' de', 'DE', 'fr ', 'FR', 'us', 'USA', 'gb', 'UK', 'Deu', 'it', '', 'XX'),"
    " cast(id * 31 % 12 AS int) + 1) AS country",
    "CASE WHEN id % 97 = 0 THEN NULL WHEN id % 89 = 0 THEN -1.0"
    " ELSE round(rand(42) * 250, 2) END AS amount",
    "element_at(array('EUR', 'usd', 'GBP', 'EUR', 'chf'), cast(id % 5 AS int) + 1) AS currency",
    "date_format(date_add(date'2026-01-01', cast(id % 365 AS int)),"
    " CASE WHEN id % 2 = 0 THEN 'yyyy-MM-dd' ELSE 'dd/MM/yyyy' END) AS ordered_on",
)

COUNTRY_ALIASES = {"UK": "GB", "DEU": "DE", "USA": "US"}
REGIONS = {"DE": "EU", "FR": "EU", "IT": "EU", "GB": "UK", "US": "NA"}
TO_EUR = {"EUR": 1.0, "USD": 0.92, "GBP": 1.17}


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
