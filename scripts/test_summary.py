#!/usr/bin/env python3
"""The closing summary of scripts/test.sh, from the log of `cargo test --no-fail-fast`: tests
passed, failed and ignored over every test binary, and the test binaries that failed (from
cargo's own lines, so a binary that crashed or did not build, and printed no `test result`, is
named too). Exits 1 when anything failed."""
import re
import sys

passed = failed = ignored = 0
targets = []
listing = False
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", line)
    if m:
        passed += int(m[1])
        failed += int(m[2])
        ignored += int(m[3])
    m = re.search(r"error: test failed, to rerun pass (`[^`]*`)", line)
    if m and m[1] not in targets:
        targets.append(m[1])
    # cargo's closing list: "error: 2 targets failed:" then one indented `-p X --test Y` a line
    if re.match(r"error: \d+ targets? failed:", line):
        listing = True
    elif listing and re.match(r"\s+`", line):
        if line.strip() not in targets:
            targets.append(line.strip())
    else:
        listing = False
print(f"== summary: {passed} passed, {failed} failed, {ignored} ignored")
if targets:
    print(f"== {len(targets)} test binaries failed: {', '.join(targets)}")
sys.exit(1 if failed or targets else 0)
