#!/usr/bin/env python3
"""Write the synthetic capture behind tests/data/store-v1 (see its README.md).

Deterministic (fixed seed): 480 Ethernet packets, several hosts, IPv4 and IPv6, DNS (53),
SIP (5060), SSH (22), HTTP (80), one 802.1Q-tagged packet, a TCP header cut short by the
snap length and an IPv4 header with a bad header length. Nothing here comes from a real
capture.

Usage: make-store-v1.py OUT.pcap
"""
import random
import struct
import sys

rng = random.Random(20261127)


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ip4(a):
    return bytes(int(x) for x in a.split("."))


def ip6(a):
    import ipaddress

    return ipaddress.IPv6Address(a).packed


def eth(payload, etype, vlan=None):
    hdr = bytes.fromhex("020000000002") + bytes.fromhex("020000000001")
    if vlan is not None:
        hdr += struct.pack("!HH", 0x8100, vlan)
    return hdr + struct.pack("!H", etype) + payload


def l4(proto, sport, dport, data):
    if proto == 17:
        return struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data
    seq = rng.getrandbits(32)
    return struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x18, 65535, 0, 0) + data


def v4(src, dst, proto, sport, dport, data, vlan=None, ihl=5):
    seg = l4(proto, sport, dport, data)
    h = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, 20 + len(seg), rng.getrandbits(16), 0,
                    64, proto, 0, ip4(src), ip4(dst))
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return eth(h + seg, 0x0800, vlan)


def v6(src, dst, proto, sport, dport, data):
    seg = l4(proto, sport, dport, data)
    h = struct.pack("!IHBB16s16s", 6 << 28, len(seg), proto, 64, ip6(src), ip6(dst))
    return eth(h + seg, 0x86DD)


def payload():
    return bytes(rng.getrandbits(8) for _ in range(rng.randint(16, 120)))


def main():
    out = sys.argv[1]
    pkts = []  # (frame, captured length)
    clients = [f"10.0.0.{i}" for i in range(1, 21)]
    for i in range(480):
        c = rng.choice(clients)
        eph = rng.randint(1024, 65535)
        kind = rng.random()
        if i in (40, 250, 470):  # a rare host, three packets far apart
            f = v4("192.0.2.77", "10.0.2.22", 6, eph, 443, payload())
        elif i == 300:  # 802.1Q-tagged SIP
            f = v4("10.0.1.10", "10.0.1.20", 17, 5060, 5060, payload(), vlan=100)
        elif i == 200:  # IPv4 header length 4 (< 5): a damaged outer header
            f = v4(c, "10.0.2.80", 6, eph, 80, payload(), ihl=4)
        elif i == 350:  # TCP header cut by the snap length
            f = v4(c, "10.0.2.22", 6, eph, 22, payload())
            pkts.append((f, 14 + 20 + 10))
            continue
        elif kind < 0.35:
            q = (c, "10.0.0.53", 17, eph, 53) if rng.random() < 0.5 else ("10.0.0.53", c, 17, 53, eph)
            f = v4(*q, payload())
        elif kind < 0.5:
            f = v4("10.0.1.10", "10.0.1.20", 17, 5060, 5060, payload())
        elif kind < 0.7:
            f = v4(c, "10.0.2.22", 6, eph, 22, payload())
        elif kind < 0.85:
            f = v4(c, "10.0.2.80", 6, eph, 80, payload())
        elif kind < 0.95:
            f = v6("2001:db8:1::2", "2001:db8:2::9", 17, eph, 53, payload())
        else:
            f = v6("2001:db8:2::9", "2001:db8:1::2", 6, 22, eph, payload())
        pkts.append((f, len(f)))
    with open(out, "wb") as w:
        w.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        t = 1_700_000_000_000_000
        for f, cap in pkts:
            t += rng.randint(100, 5000)
            w.write(struct.pack("<IIII", t // 1_000_000, t % 1_000_000, cap, len(f)))
            w.write(f[:cap])


if __name__ == "__main__":
    main()
