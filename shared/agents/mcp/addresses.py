"""Which IP addresses an MCP connection may reach (spec §5.4), decided with ``ipaddress``.

Blocked: this-network ``0.0.0.0/8``, private ``10/8``, ``172.16/12``, ``192.168/16``, link-local
and cloud metadata ``169.254/16``, CGNAT ``100.64/10``, everything from ``224.0.0.0`` up
(multicast, reserved, broadcast); IPv6 ``::``, ULA ``fc00::/7``, link-local ``fe80::/10``
(``fe80``–``febf``), multicast ``ff00::/8``; loopback (``127/8``, ``::1``) unless localhost is
allowed. An IPv6 address that embeds an IPv4 one is judged by the IPv4 rules: IPv4-mapped
``::ffff:a.b.c.d`` in either spelling, and (beyond the reference) NAT64 ``64:ff9b::/96``,
6to4 ``2002::/16`` and the deprecated IPv4-compatible ``::a.b.c.d``. Anything that is not an
IP address is blocked (fail closed). ``fec0::/10`` (deprecated site-local) stays allowed, as in
the reference.
"""

from __future__ import annotations

import ipaddress

_BLOCKED_V4 = tuple(
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "169.254.0.0/16",
        "100.64.0.0/10",
        "224.0.0.0/3",
    )
)
_LOOPBACK_V4 = ipaddress.IPv4Network("127.0.0.0/8")
_BLOCKED_V6 = tuple(ipaddress.IPv6Network(n) for n in ("fc00::/7", "fe80::/10", "ff00::/8"))
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_V4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def parse_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address in ``text`` (brackets and an IPv6 zone allowed), or None."""
    value = text.strip().lower()
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1]
    value = value.split("%", 1)[0]
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def _blocked_v4(addr: ipaddress.IPv4Address, allow_localhost: bool) -> bool:
    if addr in _LOOPBACK_V4:
        return not allow_localhost
    return any(addr in network for network in _BLOCKED_V4)


def _embedded_v4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:
        return addr.sixtofour
    if addr in _NAT64 or addr in _V4_COMPATIBLE:
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return None


def is_blocked_ip(text: str, allow_localhost: bool) -> bool:
    """Whether an MCP connection must not reach this address."""
    addr = parse_ip(text)
    if addr is None:
        return True
    if isinstance(addr, ipaddress.IPv4Address):
        return _blocked_v4(addr, allow_localhost)
    if addr.is_unspecified:
        return True
    if addr.is_loopback:
        return not allow_localhost
    embedded = _embedded_v4(addr)
    if embedded is not None:
        return _blocked_v4(embedded, allow_localhost)
    return any(addr in network for network in _BLOCKED_V6)
