"""Where outbound requests may go: an allowlist of hosts, checked on resolved addresses.

Rules, in order, for every URL (the first request and every redirect hop):

1. Only http and https.
2. The host must match `allowed_hosts`: an exact name (`api.example.com`), a
   wildcard for subdomains (`*.example.com`, which does not match
   `example.com` itself), an IP literal (`127.0.0.1`) or a network (`10.0.0.0/8`);
   any of them with a port (`api.example.com:443`, `[::1]:8080`, `10.0.0.0/8:443`)
   admits that port only, without one every port.
   A host that is an address in any spelling the OS reads as one (`2130706433`,
   `0x7f.1`, `10.0.0.5%.x.example.com`: a zone id is cut off) is that address,
   admitted only by an address or network entry, never by a name.
3. The host is resolved and EVERY address is checked (an attacker's DNS can
   mix a public and a private record). Loopback, private, link-local, CGNAT,
   multicast, unspecified, reserved and cloud-metadata addresses are refused
   unless the address itself is allowlisted (IP literal or network). The
   `allow_private` switch admits private, loopback, IPv6 link-local and CGNAT
   ranges, but never the cloud credential ranges (all of 169.254/16, where
   the AWS/GCP/Azure metadata and the ECS/EKS credential endpoints live,
   fd00:ec2::/32, 192.0.0.192, Alibaba's 100.100.100.200, Azure's
   168.63.129.16), multicast or unspecified addresses. A credential range is
   admitted only by naming its exact address.
4. IPv6 forms that carry an IPv4 address (::ffff:a.b.c.d, 6to4 2002::/16,
   NAT64 64:ff9b::/96 and 64:ff9b:1::/48, Teredo, IPv4-compatible ::a.b.c.d)
   are judged as the IPv4 address they carry.
5. The caller connects to the address that was checked (`Resolution.address`),
   not to a second DNS answer: that closes the DNS-rebinding window.
   `GuardedTransport` / `GuardedAsyncTransport` do this for any httpx (or
   httpx2) client: every request, redirects included, is checked and pinned.

This module is the one egress guard: HTTP capabilities, MCP over HTTP and the
LLM planner all go through it (JSON Schema `$ref`s never leave the server).
"""
from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Where clouds hand out instance credentials: never reachable through allow_private.
CREDENTIAL_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "169.254.0.0/16",     # AWS/GCP/Azure metadata 169.254.169.254, ECS 169.254.170.2, EKS pod identity .23
    "fd00:ec2::/32",      # AWS IPv6 metadata (fd00:ec2::254) and friends
    "192.0.0.192/32",     # Oracle Cloud metadata
    "100.100.100.200/32",  # Alibaba Cloud metadata
    "168.63.129.16/32",   # Azure wire server
))
CGNAT = ipaddress.ip_network("100.64.0.0/10")
NAT64_NETWORKS = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
# What inet_aton (so getaddrinfo, without asking DNS) reads as an IPv4 address: one to four parts, each
# decimal, octal (0...) or hex (0x...); 2130706433, 0x7f.1 and 017700000001 are all 127.0.0.1.
INET_ATON = re.compile(r"(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}", re.IGNORECASE)

Resolver = Callable[[str, int], list[str]]


class URLRefused(ValueError):
    """The guard refused a URL; the message names the host and the reason."""

    def __init__(self, host: str, reason: str) -> None:
        super().__init__(f"request to {host!r} refused: {reason}")
        self.host = host
        self.reason = reason


@dataclass(frozen=True)
class Resolution:
    url: str
    scheme: str
    host: str          # as written in the URL, lowercased, without brackets
    port: int
    address: str       # the checked address to connect to


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


class NetGuard:
    def __init__(self, allowed_hosts: Iterable[str] = (), *, allow_private: bool = False,
                 resolver: Resolver = system_resolver, credential_entries: bool = True) -> None:
        """credential_entries=False: not even an exact entry admits a credential address (LLM endpoints)."""
        self.allow_private = allow_private
        self.credential_entries = credential_entries
        self.resolver = resolver
        # Each entry with the port it admits (None: every port).
        self.names: dict[str, set[int | None]] = {}
        self.suffixes: list[tuple[str, int | None]] = []
        self.networks: list[IPNetwork] = []
        self.network_ports: list[int | None] = []
        for raw in allowed_hosts:
            entry, port = entry_port(raw)
            if not entry:
                continue
            if entry.startswith("*."):
                self.suffixes.append((entry[1:], port))  # ".example.com"
                continue
            try:
                self.networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                self.network_ports.append(port)
            except ValueError:
                self.names.setdefault(entry, set()).add(port)

    def check(self, url: str) -> Resolution:
        """Allow the URL or raise URLRefused; resolves the host (DNS) to check its addresses."""
        scheme, host, port = self._parse(url)
        return self.check_host(host, port, scheme=scheme, url=url)

    def check_host(self, host: str, port: int, *, scheme: str = "tcp", url: str = "") -> Resolution:
        """The same decision for a connection that is not an http(s) URL (SMTP): host and port as the
        sender will use them; connect to the returned `address`."""
        host = host.strip().strip("[]").lower().rstrip(".")
        if not host:
            raise URLRefused(url or "(empty)", "the URL has no host")
        literal = _as_ip(host)
        if literal is not None:
            # Only by its address: a name entry never admits one (10.0.0.5%.x.example.com is 10.0.0.5,
            # whatever *.example.com admits).
            if not self._address_listed(literal, port):
                where = f" at port {port}" if self._address_listed(literal) else ""
                raise URLRefused(host, f"the address is not on the allowlist{where}")
            addresses = [literal]
        else:
            if not self._host_listed(host, port):
                where = f" at port {port}" if self._host_listed(host) else ""
                raise URLRefused(host, f"the host is not on the allowlist{where}")
            try:
                answers = self.resolver(host, port)
            except (OSError, UnicodeError) as exc:
                raise URLRefused(host, f"it does not resolve ({exc})") from None
            addresses = [a for a in (_as_ip(answer) for answer in answers) if a is not None]
            if not addresses:
                raise URLRefused(host, "it resolves to no address")
        for address in addresses:
            reason = self._forbidden(address)
            if reason:
                subject = f"{address}" if literal is not None else f"it resolves to {address}, which"
                raise URLRefused(host, f"{subject} is {reason}")
        return Resolution(url=url or f"{scheme}://{host}:{port}", scheme=scheme, host=host, port=port,
                          address=str(addresses[0]))

    def _parse(self, url: str) -> tuple[str, str, int]:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise URLRefused(url, f"not a valid URL ({exc})") from None
        if parts.scheme not in ("http", "https"):
            raise URLRefused(parts.hostname or url, f"scheme {parts.scheme or '(none)'!r} is not http or https")
        host = (parts.hostname or "").rstrip(".")
        if not host:
            raise URLRefused(url, "the URL has no host")
        return parts.scheme, host, port or (443 if parts.scheme == "https" else 80)

    def _host_listed(self, host: str, port: int | None = None) -> bool:
        """Whether an entry admits the host, at `port` (None: at some port, as a form checks a bare host)."""
        return (any(_admits(p, port) for p in self.names.get(host, ()))
                or any(host.endswith(suffix) and _admits(p, port) for suffix, p in self.suffixes))

    def _address_listed(self, address: IPAddress, port: int | None = None) -> bool:
        return any(address.version == net.version and address in net and _admits(p, port)
                   for net, p in zip(self.networks, self.network_ports, strict=True))

    def _forbidden(self, address: IPAddress) -> str:
        """Why this address may not be contacted ('' when it may)."""
        credential = next((net for net in CREDENTIAL_NETWORKS if address.version == net.version and address in net),
                          None)
        if credential is not None:
            # Only naming the exact address admits it; a wide network entry (or allow_private) does not.
            exact = self.credential_entries and any(net.num_addresses == 1 and address in net
                                                    for net in self.networks if net.version == address.version)
            return "" if exact else f"in the cloud metadata/credential range {credential}"
        if self._address_listed(address):
            return ""  # an operator named this address explicitly
        if address.is_unspecified:
            return "an unspecified address"
        if address.is_multicast:
            return "a multicast address"
        private_kind = _private_kind(address)
        if private_kind:
            return "" if self.allow_private else f"{private_kind} address (allow_private is off)"
        if address.is_reserved or not address.is_global:
            return "a reserved, non-global address"
        return ""


def entry_port(raw: str) -> tuple[str, int | None]:
    """An allowlist entry and the port it names: api.example.com:443, [::1]:8080, 10.0.0.0/8:443 (None: none).
    A bare IPv6 address or network (::1, fd00::/8) has colons but no port."""
    entry = raw.strip().lower()
    head, colon, tail = entry.rpartition(":")
    if colon and tail.isdigit() and (head.endswith("]") or ":" not in head):
        port, entry = int(tail), head   # out of 1-65535 it admits nothing (the settings refuse it first)
    else:
        port = None
    return entry.strip("[]" if port is not None else "").rstrip("."), port


def _admits(listed: int | None, port: int | None) -> bool:
    return listed is None or port is None or listed == port


def _private_kind(address: IPAddress) -> str:
    if address.is_loopback:
        return "a loopback"
    if address.is_link_local:
        return "a link-local"
    if address.version == 6 and address.is_site_local:
        return "a site-local"  # fec0::/10: deprecated, still routed inside some networks; Python calls it global
    if address.version == 4 and address in CGNAT:
        return "a carrier-grade NAT"
    if address.is_private:
        return "a private"
    return ""


def _as_ip(value: str) -> IPAddress | None:
    value = value.strip("[]").split("%")[0]
    try:
        address: IPAddress = ipaddress.ip_address(value)
    except ValueError:
        if not INET_ATON.fullmatch(value):
            return None
        try:
            address = ipaddress.IPv4Address(socket.inet_aton(value))
        except OSError:
            return None
    return unwrap(address)


def is_address(host: str) -> bool:
    """Whether the guard reads `host` as an IP address (in any spelling), not as a name to resolve."""
    return _as_ip(host.strip().lower().rstrip(".")) is not None


def unwrap(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 form carries (::ffff:127.0.0.1 is 127.0.0.1), else the address."""
    if address.version != 6:
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # the client's (obfuscated) address: the end that is reached
    packed = address.packed
    if any(address in net for net in NAT64_NETWORKS) or (address in IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(packed[-4:])
    return address


def validate_url(url: str, guard: NetGuard, *, resolve: bool = True) -> None:
    """For registration forms: raise URLRefused (a ValueError) with a clear message.

    `{idempotency_key}` placeholders are allowed. With resolve=False only the
    scheme and the allowlist are checked (DNS may not be set up yet); the call
    itself always checks resolved addresses.
    """
    url = url.replace("{idempotency_key}", "key")
    if resolve:
        guard.check(url)
        return
    _scheme, host, port = guard._parse(url)
    validate_host(host, guard, port)


def validate_host(host: str, guard: NetGuard, port: int | None = None) -> None:
    """validate_url(resolve=False) for a bare host (an SMTP server): the allowlist, and a literal's range;
    at `port` when it is known."""
    host = host.strip().strip("[]").lower().rstrip(".")
    if not host:
        raise URLRefused("(empty)", "the URL has no host")
    literal = _as_ip(host)
    if literal is not None:
        if not guard._address_listed(literal, port):
            raise URLRefused(host, "the address is not on the allowlist")
        reason = guard._forbidden(literal)
        if reason:
            raise URLRefused(host, f"{literal} is {reason}")
    elif not guard._host_listed(host, port):
        raise URLRefused(host, "the host is not on the allowlist")


# -- pinned transports for httpx clients -------------------------------------------------------

def pin_request(guard: NetGuard, request: Any) -> Resolution:
    """Check an httpx/httpx2 request's URL and point it at the checked address, in place.

    The Host header and the TLS server name keep the original host, so virtual
    hosting and certificate checks work as if the name had been resolved again.
    """
    target = guard.check(str(request.url))
    request.url = request.url.copy_with(host=target.address)
    default = 443 if target.scheme == "https" else 80
    host = f"[{target.host}]" if ":" in target.host else target.host
    request.headers["Host"] = host if target.port == default else f"{host}:{target.port}"
    request.extensions = {**request.extensions, "sni_hostname": target.host}
    return target


class GuardedTransport(httpx.BaseTransport):
    """An httpx transport that sends each request only to the address the guard checked.

    Raises URLRefused (not an httpx error) when the guard refuses, so a caller
    can tell "we refused" from "the network failed".
    """

    def __init__(self, guard: NetGuard, inner: httpx.BaseTransport | None = None) -> None:
        self.guard = guard
        self.inner = inner or httpx.HTTPTransport(trust_env=False)

    def handle_request(self, request: Any) -> Any:
        pin_request(self.guard, request)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()



def guarded_async_transport(guard: NetGuard, inner: Any = None) -> Any:
    """The same for httpx2's AsyncClient (the MCP SDK's HTTP client)."""
    import httpx2

    class GuardedAsyncTransport(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self.inner = inner or httpx2.AsyncHTTPTransport(trust_env=False)

        async def handle_async_request(self, request: Any) -> Any:
            pin_request(guard, request)
            return await self.inner.handle_async_request(request)

        async def aclose(self) -> None:
            await self.inner.aclose()

    return GuardedAsyncTransport()
