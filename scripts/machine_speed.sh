#!/usr/bin/env bash
# This machine's speed now: the median CPU-s of a fixed pure-Python loop over 5 runs (lower is
# faster) and the steal share of the CPU meanwhile. Printed beside timed runs, because a shared
# 2-core VM drifts by tens of percent within an hour (the same loop read 0.63-1.25 s in one day).
set -euo pipefail
read -r _ u n s i w q sq st _ < /proc/stat
for _ in 1 2 3 4 5; do
  python3 -c 'import time; t = time.process_time(); sum(i * i for i in range(10**7)); print("%.3f" % (time.process_time() - t))'
done | sort -n | sed -n 3p | tr '\n' ' '
read -r _ u2 n2 s2 i2 w2 q2 sq2 st2 _ < /proc/stat
total=$(( (u2 + n2 + s2 + i2 + w2 + q2 + sq2 + st2) - (u + n + s + i + w + q + sq + st) ))
echo "steal $(( 100 * (st2 - st) / (total > 0 ? total : 1) ))% $(date +%H:%M:%S)"
