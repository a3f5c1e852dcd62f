#!/usr/bin/env python3
"""Oracle of crates/cli/tests/flows_parquet.rs: the Parquet files of `weir flows --parquet`,
read by pyarrow and by DuckDB, hold exactly the records of `weir flows --json` (compared as
sorted lists of every field); and the README's DuckDB top-talkers query, run verbatim in WORKDIR,
equals the same aggregation computed here from pyarrow's rows of that hour's partition.

usage: parquet_check.py JSON PARQUET_DIR README WORKDIR [SENSOR]
Prints `ok N records, M files, T talkers` and exits 0, or prints the first difference, exits 1.
"""
import datetime
import glob
import ipaddress
import json
import os
import re
import sys

try:
    import duckdb
    import pyarrow.parquet as pq
    import pyarrow as pa
except ImportError as e:
    sys.exit(f"{e}: run scripts/setup.sh (pip install duckdb pyarrow)")

COLS = ["flowStartNanoseconds", "flowEndNanoseconds", "vlanId", "sourceIPAddress",
        "destinationIPAddress", "protocolIdentifier", "sourceTransportPort",
        "destinationTransportPort", "ipClassOfService", "packetDeltaCount", "octetDeltaCount",
        "tcpControlBits", "minimumTTL", "maximumTTL", "reverseFlowStartNanoseconds",
        "reverseFlowEndNanoseconds", "reversePacketDeltaCount", "reverseOctetDeltaCount",
        "reverseTcpControlBits", "reverseMinimumTTL", "reverseMaximumTTL", "flowEndReason", "tag"]
TIMES = {0, 1, 14, 15}
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def iso_ns(s):
    """`YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` -> ns since the epoch."""
    if s is None:
        return None
    head, frac = s[:-1].split(".")
    t = datetime.datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    secs = (t - EPOCH) // datetime.timedelta(seconds=1)
    return secs * 1_000_000_000 + int(frac)


def addr_json(s):
    a = ipaddress.ip_address(s)
    if a.version == 4:
        return (4, ipaddress.IPv6Address("::ffff:" + s).packed)
    return (6, a.packed)


def from_json(path):
    rows = []
    with open(path) as f:
        for line in f:
            o = json.loads(line)
            r = []
            for i, c in enumerate(COLS):
                v = o.get(c)
                if i in TIMES:
                    v = iso_ns(v)
                elif c in ("sourceIPAddress", "destinationIPAddress"):
                    v = addr_json(v)
                r.append(v)
            rows.append(tuple(r))
    return rows


def files(top):
    # hidden temporary files are not part of the data set
    return sorted(p for p in glob.glob(os.path.join(top, "date=*", "hour=*", "*.parquet")))


def from_pyarrow(top, sensor):
    rows = []
    for p in files(top):
        t = pq.read_table(p)
        cols = {}
        for c in t.column_names:
            col = t.column(c)
            if pa.types.is_timestamp(col.type):
                assert col.type.unit == "ns" and col.type.tz in ("UTC", "+00:00"), (c, col.type)
                col = col.cast(pa.int64())
            cols[c] = col.to_pylist()
        for i in range(t.num_rows):
            v = cols["ipVersion"][i]
            r = []
            for c in COLS:
                x = cols[c][i]
                if c in ("sourceIPAddress", "destinationIPAddress"):
                    x = (v, x)
                r.append(x)
            assert cols["sensor"][i] == sensor, (p, cols["sensor"][i])
            rows.append(tuple(r))
    return rows


def from_duckdb(top):
    sel = []
    for i, c in enumerate(COLS):
        sel.append(f"epoch_ns({c})" if i in TIMES else c)
    sel.insert(3, "ipVersion")
    q = f"SELECT {', '.join(sel)} FROM read_parquet({files(top)!r})"
    rows = []
    for r in duckdb.sql(q).fetchall():
        r = list(r)
        v = r.pop(3)
        r[3] = (v, bytes(r[3]))
        r[4] = (v, bytes(r[4]))
        rows.append(tuple(r))
    return rows


def norm(rows):
    return sorted(rows, key=repr)


def first_diff(name, a, b):
    if len(a) != len(b):
        return f"{name}: {len(b)} records, JSON has {len(a)}"
    for x, y in zip(a, b):
        if x != y:
            return f"{name}: first difference\n  json:    {x}\n  {name}: {y}"
    return None


def show(v, packed):
    a = ipaddress.IPv6Address(packed)
    return str(a.ipv4_mapped) if v == 4 else a.exploded.replace(":", "")


def readme_query(readme, top, workdir):
    text = open(readme).read()
    m = re.search(r"<!-- pipelines-duckdb -->\s*```sql\n(.*?)```", text, re.S)
    assert m, "no DuckDB query in the README"
    sql = m.group(1)
    date, hour = re.search(r"date = DATE '([0-9-]+)' AND hour = (\d+)", sql).groups()
    os.chdir(workdir)
    got = [tuple(r) for r in duckdb.sql(sql).fetchall()]
    # the oracle: pyarrow's rows of that partition, aggregated here
    agg = {}
    for p in glob.glob(os.path.join(top, f"date={date}", f"hour={int(hour):02}", "*.parquet")):
        t = pq.read_table(p).to_pydict()
        for i in range(len(t["ipVersion"])):
            k = show(t["ipVersion"][i], t["sourceIPAddress"][i])
            b, n, f = agg.get(k, (0, 0, 0))
            agg[k] = (b + t["octetDeltaCount"][i] + t["reverseOctetDeltaCount"][i],
                      n + t["packetDeltaCount"][i] + t["reversePacketDeltaCount"][i], f + 1)
    want = sorted(((k,) + v for k, v in agg.items()), key=lambda r: (-r[1], r[0]))[:10]
    return got, want


def main():
    json_path, top, readme, workdir = sys.argv[1:5]
    sensor = sys.argv[5] if len(sys.argv) > 5 else None
    want = norm(from_json(json_path))
    n_files = len(files(top))
    for name, rows in (("pyarrow", from_pyarrow(top, sensor)), ("duckdb", from_duckdb(top))):
        d = first_diff(name, want, norm(rows))
        if d:
            print(d)
            return 1
    got, oracle = readme_query(readme, top, workdir)
    if got != oracle or not got:
        print(f"README query: {got}\n  oracle: {oracle}")
        return 1
    print(f"ok {len(want)} records, {n_files} files, {len(got)} talkers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
