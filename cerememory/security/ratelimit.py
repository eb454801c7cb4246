"""Per-client token buckets, and who the client is.

A client is its API key id when it authenticated (so one key is one budget however many
addresses it calls from), else its address. The address is the direct peer, unless that peer is
a trusted proxy: then it is the rightmost `X-Forwarded-For` address that is not itself a trusted
proxy (the leftmost entries are whatever the client chose to send).
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..cmp.errors import CMPError, ErrorCode

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TokenBucketLimiter:
    """`rate` tokens per second refill each client's bucket up to `burst`; a request takes one.
    Full buckets are dropped now and then, so memory stays bounded by the active clients."""

    SWEEP_EVERY = 4096

    def __init__(self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive and burst at least 1")
        self.rate, self.burst, self.clock = float(rate), int(burst), clock
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, at)
        self._lock = threading.Lock()
        self._calls = 0

    def acquire(self, client: str) -> float:
        """0.0 when the request may go ahead, else the seconds until it could."""
        now = self.clock()
        with self._lock:
            tokens, at = self._buckets.get(client, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            if tokens >= 1.0:
                self._buckets[client] = (tokens - 1.0, now)
                wait = 0.0
            else:
                self._buckets[client] = (tokens, now)
                wait = (1.0 - tokens) / self.rate
            self._calls += 1
            if self._calls % self.SWEEP_EVERY == 0:
                self._sweep(now)
        return wait

    def _sweep(self, now: float) -> None:
        full = [c for c, (tokens, at) in self._buckets.items() if tokens + (now - at) * self.rate >= self.burst]
        for client in full:
            del self._buckets[client]

    def __len__(self) -> int:
        return len(self._buckets)

    def check(self, client: str) -> None:
        """Raise RATE_LIMITED (with `retry_after` in whole seconds) when the client is over."""
        wait = self.acquire(client)
        if wait > 0:
            raise CMPError(ErrorCode.RATE_LIMITED, f"too many requests from {client}",
                           hint=f"slow down to {self.rate:g} requests per second (bursts of {self.burst})",
                           retry_after=max(1, math.ceil(wait)))


def parse_networks(value: str | Iterable[str] | None) -> tuple[Network, ...]:
    """Trusted proxies from a comma-separated setting: addresses or CIDR blocks."""
    items = value.split(",") if isinstance(value, str) else list(value or ())
    networks = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"ratelimit.trusted_proxies: {item!r} is not an address or CIDR",
                           hint="e.g. 10.0.0.0/8,127.0.0.1") from None
    return tuple(networks)


def _address(text: str | None) -> Any:
    if not text:
        return None
    text = text.strip().strip("[]")
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _trusted(address: Any, trusted: tuple[Network, ...]) -> bool:
    return address is not None and any(address in net for net in trusted if net.version == address.version)


def client_address(peer: str | None, forwarded_for: str | None, trusted: tuple[Network, ...]) -> str:
    """The address to key an anonymous client on (see the module docstring)."""
    direct = _address(peer)
    if direct is None:
        return peer or "unknown"
    if not forwarded_for or not _trusted(direct, trusted):
        return str(direct)
    hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:
            break  # a garbled entry: believe nothing further left
        if not _trusted(address, trusted):
            return str(address)
    return str(direct)


def client_key(key_id: str | None, address: str) -> str:
    return f"key:{key_id}" if key_id else f"ip:{address}"


class RateLimit:
    """The limiter and the proxy rule, as one object the transports share."""

    def __init__(self, limiter: TokenBucketLimiter, trusted: tuple[Network, ...] = ()) -> None:
        self.limiter = limiter
        self.trusted = trusted

    @classmethod
    def from_config(cls, config: Any, *, loopback: bool) -> RateLimit | None:
        enabled = config["ratelimit.enabled"]
        if enabled == "off" or (enabled == "auto" and loopback):
            return None
        return cls(TokenBucketLimiter(config["ratelimit.rate"], config["ratelimit.burst"]),
                   parse_networks(config["ratelimit.trusted_proxies"]))

    def address(self, peer: str | None, forwarded_for: str | None) -> str:
        return client_address(peer, forwarded_for, self.trusted)

    def check(self, key_id: str | None, address: str) -> None:
        self.limiter.check(client_key(key_id, address))


class FailedAuthLimit:
    """A budget of failed authentications per client address: past it, a missing or wrong key is
    answered 429 (with Retry-After) instead of 401.

    A right key is never refused by it: every agent on one machine shares 127.0.0.1, so a
    misbehaving neighbour must not lock a good client out. Keys are 256-bit random, so what the
    limit stops is a flood of failures (log lines, audit noise, CPU), not a guess.
    """

    def __init__(self, limiter: TokenBucketLimiter, trusted: tuple[Network, ...] = ()) -> None:
        self.limiter = limiter
        self.trusted = trusted

    @classmethod
    def from_config(cls, config: Any) -> FailedAuthLimit:
        return cls(TokenBucketLimiter(config["auth.failure_rate"], config["auth.failure_burst"]),
                   parse_networks(config["ratelimit.trusted_proxies"]))

    def address(self, peer: str | None, forwarded_for: str | None) -> str:
        return client_address(peer, forwarded_for, self.trusted)

    def refuse(self, address: str) -> CMPError:
        """The error for one failed authentication from `address`."""
        wait = self.limiter.acquire(address)
        if wait > 0:
            return CMPError(ErrorCode.RATE_LIMITED, f"too many failed authentications from {address}",
                            hint="check the API key; a right key is still accepted",
                            retry_after=max(1, math.ceil(wait)))
        return unauthorized()


def unauthorized() -> CMPError:
    return CMPError(ErrorCode.UNAUTHORIZED, "missing or wrong API key",
                    hint="send `Authorization: Bearer <key>` (an HTTP header, or gRPC metadata)")
