#!/bin/bash
# The lane walk prototype (docs/experiments/lane_walk.rs, built as ./fm) against the compiled
# engine on the identical work list; first checks their per-depth counts agree.
# cmp.sh BOARD S MAX PER ROUNDS : frame lanes (K=2,3) against the compiled engine on the same work list
B=$1; S=$2; MAX=$3; PER=$4; R=${5:-3}
name=$(echo $B | tr / _)
C=${TMPDIR:-/tmp}/lane_walk_c_$name
if ! ls $C/e2fleet-engine-* >/dev/null 2>&1; then target/release/e2fleet-worker bench --board puzzles/brendan/$B.txt --seconds 0.2 --runs 1 --cache-dir $C >/dev/null 2>&1; fi
E=$(ls $C/e2fleet-engine-* | grep -v seal | head -1)
./fm puzzles/brendan/$B.txt dump $S $MAX 2>/dev/null > pre_$name.txt
DEPTHS=1 ./fm puzzles/brendan/$B.txt lanes3 $S $MAX $PER 2 2>/dev/null | head -1 | cut -d' ' -f$((S+2))- > a.txt
python3 $(dirname $0)/lane_walk_drive.py $E pre_$name.txt $PER | head -1 | cut -d' ' -f$((S+2))- > b.txt
cmp -s a.txt b.txt && echo "$B: per-depth counts below depth $S identical" || echo "$B: COUNTS DIFFER"
for i in $(seq $R); do
  for k in 2 3; do ./fm puzzles/brendan/$B.txt lanes3 $S $MAX $PER $k 2>/dev/null | sed "s/^/  /"; done
  python3 $(dirname $0)/lane_walk_drive.py $E pre_$name.txt $PER | tail -1 | sed "s/^/  /"
done
