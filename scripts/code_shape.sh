#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The shape of the daemon's code (not a test): its largest classes (lines =
# the class in its header plus its out-of-line method bodies; methods =
# distinct out-of-line definitions; the files they are in), the functions
# over 60 lines, how many are above cyclomatic complexity 15, and the counts
# the layout rules watch (docs/architecture.md): role branches on leader_ in
# daemon/peer, failure announcements from daemon/server, environment reads
# outside the two places that read it.
#
#   scripts/code_shape.sh [DIR]     (default: daemon)
#
# Uses lizard (PyPI), installed for the user when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-daemon}"
python3 -c "import lizard" 2>/dev/null || python3 -m pip install --quiet --user lizard
csv="$(mktemp)"
trap 'rm -f "$csv"' EXIT
python3 -m lizard --csv -l cpp -x "*_test.cc" -x "*_bench.cc" -x "*/tests/*" "$dir" >"$csv" 2>/dev/null || true
python3 - "$csv" "$dir" <<'EOF'
import collections, csv, glob, re, sys

rows = list(csv.reader(open(sys.argv[1])))
root = sys.argv[2]
functions = []  # (length, ccn, name, file, start)
for r in rows:
    if len(r) < 11:
        continue
    functions.append((int(r[4]), int(r[1]), r[7], r[6], int(r[9])))

# Out-of-line methods by class (the name's second-to-last part).
methods = collections.defaultdict(dict)
for length, ccn, name, path, start in functions:
    parts = name.split("::")
    if len(parts) < 2 or not parts[-2][:1].isupper():
        continue
    methods[parts[-2]][(path, start)] = (length, path)

def header_lines(cls):
    pattern = re.compile(r"^\s*class\s+" + re.escape(cls) + r"\b(?!::)[^;]*$")  # not a nested class of it
    for header in glob.glob(root + "/**/*.h", recursive=True):
        lines = open(header).read().split("\n")
        for i, line in enumerate(lines):
            if not pattern.match(line):
                continue
            depth, seen = 0, False
            for j in range(i, len(lines)):
                depth += lines[j].count("{") - lines[j].count("}")
                seen = seen or "{" in lines[j]
                if seen and depth <= 0:
                    return j - i + 1, header
    return 0, None

table = []
for cls, defs in methods.items():
    if len(defs) < 10:
        continue
    header, path = header_lines(cls)
    body = sum(length for length, _ in defs.values())
    files = sorted({p for _, p in defs.values()})
    table.append((header + body, len(defs), cls, files))
table.sort(reverse=True)
print("## classes with 10 or more out-of-line methods (lines / methods / files)")
for lines, count, cls, files in table[:15]:
    print(f"{cls:28} {lines:5} / {count:3}   {len(files)} files: {' '.join(f.split('/')[-1] for f in files)}")

long = sorted((f for f in functions if f[0] > 60), reverse=True)
print(f"\n## functions over 60 lines: {len(long)}")
for length, ccn, name, path, start in long:
    print(f"{length:4} lines  complexity {ccn:3}  {name}  ({path}:{start})")
complex_count = sum(1 for f in functions if f[1] > 15)
print(f"\n## functions above complexity 15: {complex_count}")

def grep(pattern, paths, exclude=()):
    count = 0
    for path in paths:
        if any(e in path for e in exclude) or path.endswith("_test.cc"):
            continue
        for line in open(path):
            if re.search(pattern, line) and not line.strip().startswith("//"):
                count += 1
    return count

peer = glob.glob(root + "/peer/*.cc")
server = glob.glob(root + "/server/*.cc")
everything = glob.glob(root + "/**/*.cc", recursive=True) + glob.glob(root + "/**/*.h", recursive=True)
role = r"if \(!?leader_\)|leader_ \?|leader_ &&|\|\| !?leader_|!leader_ \|\|"
counts = [
    (f"role branches on leader_ in {root}/peer", grep(role, peer)),
    (f"announceFailure called from {root}/server", grep(r"announceFailure\(", server)),
    (f"failures the job detected, reported to the peer side (failedHere) from {root}/server",
     grep(r"failedHere\(", server)),
    (f"getenv outside {root}/common/environment.cc", grep(r"getenv\(", everything, ("common/environment.cc",))),
]
print("\n## layout counts")
for what, count in counts:
    print(f"{what}: {count}")
EOF
