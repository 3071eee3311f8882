"""Separate network hosts on one machine, for cluster and failure tests: each host a
Linux network namespace with its own address on a private bridge, and links that can be cut.

Layout: one bridge ``nsqb<N>`` on the machine holding ``10.<a>.<b>.1/24``; host k is namespace
``nsqh<N>-<k>`` with address ``10.<a>.<b>.<k+2>`` on a veth whose machine end is enslaved to the
bridge. The machine itself (the bridge address) is reachable from every host: a test can run
etcd or a client there. ``cut(host)`` sets the machine end of the host's veth down, so the host
loses every peer and the machine at once, as a pulled cable does (established TCP connections
stall, new ones time out); ``heal(host)`` sets it up again. Processes run in a host through
``ip netns exec``; ``kill -9`` and SIGSTOP are the test's own.

Needs root (CAP_NET_ADMIN) and iproute2; ``unavailable()`` says why a machine cannot, and the
tests skip saying it. Everything is removed by ``close()`` (and bridges/namespaces left by a
killed run are named after its pid, so they never collide with a later one). No traffic leaves
the machine: the bridge has no uplink and no route beyond its /24."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

#: Tags (bridge numbers) in use are 0 .. TAGS-1: each maps to its own 10.<200+tag//250>.<tag%250>.
TAGS = 50 * 250


def _link_exists(name: str) -> bool:
    return (
        subprocess.run(["ip", "link", "show", name], capture_output=True, timeout=20).returncode
        == 0
    )


def unavailable() -> str | None:
    """Why network namespaces cannot be made here (None when they can)."""
    if shutil.which("ip") is None:
        return "iproute2's ip command is missing"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN)"
    return None


def _ip(*args: str, netns: str | None = None) -> None:
    argv = ["ip", *args] if netns is None else ["ip", "netns", "exec", netns, "ip", *args]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {p.stderr.strip()}")


class NetLab:
    """``hosts`` separate network hosts (see the module comment); a context manager.

    ``address(k)`` is host k's IPv4 address, ``gateway`` the machine's address on the bridge;
    ``command(k, argv)`` the argv that runs ``argv`` inside host k. RuntimeError when a step of
    the set-up fails (what was made is removed again)."""

    def __init__(self, hosts: int, tag: int | None = None) -> None:
        if not 1 <= hosts <= 200:
            raise ValueError("hosts must be in [1, 200]")
        self._made_bridge = False
        self._made: list[int] = []
        # The bridge name is the lock: the kernel refuses a second link of that name, so two
        # processes (pytest-xdist workers) never get the same tag, hence never the same /24.
        first = (os.getpid() if tag is None else tag) % TAGS
        for i in range(TAGS if tag is None else 1):
            self._set_tag((first + i) % TAGS, hosts)
            try:
                _ip("link", "add", self.bridge, "type", "bridge")
            except RuntimeError:
                if tag is None and _link_exists(self.bridge):
                    continue  # taken by another run: try the next tag
                raise
            self._made_bridge = True
            break
        else:
            raise RuntimeError("no free bridge name nsqb<N> left")
        try:
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for k in range(hosts):
                self._add_host(k)
        except BaseException:
            self.close()
            raise

    def _set_tag(self, tag: int, hosts: int) -> None:
        self.tag = tag
        self.bridge = f"nsqb{tag}"
        self.prefix = f"10.{200 + tag // 250}.{tag % 250}"  # one /24 per tag
        self.gateway = f"{self.prefix}.1"
        self.names = [f"nsqh{tag}-{k}" for k in range(hosts)]

    def _veth(self, k: int) -> str:
        return f"nv{self.tag}-{k}"

    def _add_host(self, k: int) -> None:
        ns, outer, inner = self.names[k], self._veth(k), f"ne{self.tag}-{k}"
        _ip("netns", "add", ns)
        self._made.append(k)
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", ns)
        _ip("link", "set", outer, "master", self.bridge)
        _ip("link", "set", outer, "up")
        _ip("addr", "add", f"{self.address(k)}/24", "dev", inner, netns=ns)
        _ip("link", "set", inner, "up", netns=ns)
        _ip("link", "set", "lo", "up", netns=ns)
        _ip("route", "add", "default", "via", self.gateway, netns=ns)

    def address(self, k: int) -> str:
        return f"{self.prefix}.{k + 2}"

    def command(self, k: int, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.names[k], *argv]

    def cut(self, k: int) -> None:
        """Host k loses its link: no peer and not the machine reach it, nor it them."""
        _ip("link", "set", self._veth(k), "down")

    def heal(self, k: int) -> None:
        _ip("link", "set", self._veth(k), "up")

    def close(self) -> None:
        """Remove the namespaces, veths and the bridge (errors ignored: best effort)."""
        for k in reversed(self._made):
            subprocess.run(["ip", "link", "del", self._veth(k)], capture_output=True, timeout=20)
            subprocess.run(["ip", "netns", "del", self.names[k]], capture_output=True, timeout=20)
        self._made.clear()
        if self._made_bridge:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=20)
            self._made_bridge = False

    def __enter__(self) -> NetLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
