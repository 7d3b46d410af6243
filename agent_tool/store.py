"""A small demo store standing in for a service's own database: orders and their sellers, class
occurrences and their members. The agent tool reads it; it never writes it.

In a real service these are the service's tables; what matters is that the tool's handler loads
the record by id, so the recipient, the message data and the business key all come from the
record, never from the model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Seller:
    seller_id: str
    name: str
    phone: str
    email: str


@dataclass(frozen=True)
class Order:
    order_id: str
    seller_id: str
    marketplace: str  # which marketplace's staff may act on it
    state: str  # placed | cancelled | shipped
    total: str
    item_count: int


@dataclass(frozen=True)
class Member:
    member_id: str
    phone: str
    email: str


@dataclass(frozen=True)
class ClassOccurrence:
    occurrence_id: str
    studio: str  # which studio's staff may act on it
    name: str
    starts_at: str
    state: str  # scheduled | cancelled
    hold_minutes: int
    waitlist: tuple[str, ...]  # member ids, in order
    booked: tuple[str, ...]


@dataclass(frozen=True)
class DemoStore:
    sellers: dict[str, Seller]
    orders: dict[str, Order]
    members: dict[str, Member]
    classes: dict[str, ClassOccurrence]


def demo_store() -> DemoStore:
    """The records the demo and the tests use (fixed numbers in the +1 555 fictional range)."""
    sellers = {
        "sel_17": Seller("sel_17", "Lumen Ceramics", "+15550100017", "orders@lumen.example.com"),
        "sel_42": Seller("sel_42", "Northwind Outfitters", "+15550100042", "shop@northwind.example.com"),
    }
    orders = {
        "ord_1001": Order("ord_1001", "sel_17", "eu", "placed", "EUR 48.00", 2),
        "ord_1002": Order("ord_1002", "sel_17", "eu", "cancelled", "EUR 12.50", 1),
        "ord_2001": Order("ord_2001", "sel_42", "us", "placed", "USD 99.00", 3),
    }
    members = {
        "mem_7": Member("mem_7", "+15550200007", "mem7@example.com"),
        "mem_9": Member("mem_9", "+15550200009", "mem9@example.com"),
    }
    classes = {
        "cls_501": ClassOccurrence("cls_501", "riverside", "Spin", "Mon 18:00", "scheduled", 15, ("mem_7",), ("mem_9",)),
        "cls_502": ClassOccurrence("cls_502", "riverside", "Yoga", "Tue 07:30", "cancelled", 15, (), ("mem_7", "mem_9")),
    }
    return DemoStore(sellers=sellers, orders=orders, members=members, classes=classes)
