#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The test runner itself (tests/run-tests.sh), on a tree of its own made
# here: a copy of the runner, a docs/testing.md with a table of budgets,
# a stand-in for tests/lib/rgw.sh that records what it was asked, and
# small integration tests that pass, fail, skip, sleep and record when
# they ran.  Checked: tests run FMFS_JOBS at a time (two overlap, never
# three), longest first; a '# exclusive:' test runs alone, after the
# others; a '# gateway: own' test gets a gateway of its own, stopped at
# its end; each test's output is printed whole with its wall time; a test
# over its budget and one without a row get a WARNING; the ten slowest and
# the summary come last; a skip is a failure under
# FMFS_REQUIRE_INTEGRATION; FMFS_TIER=quick runs only the quick rows;
# bad FMFS_JOBS and FMFS_TIER values exit 2 naming the variable.
. "$TOP/tests/lib/common.sh"

cd "$TEST_DIR"
F=$TEST_DIR/tree
mkdir -p "$F/tests/integration" "$F/tests/lib" "$F/docs" "$F/tests/unit"
cp "$TOP/tests/run-tests.sh" "$F/tests/"
LOG=$TEST_DIR/events
: >"$LOG"
cat >"$F/tests/lib/rgw.sh" <<EOF
#!/bin/bash
# stands in for the gateway: records the call, writes DIR/env
echo "rgw \$1 \$2" >>"$LOG"
if [ "\$1" = start ]; then
	mkdir -p "\$2"
	echo "export RGW_DIR=\$2 RGW_ENDPOINT=http://127.0.0.1:1" >"\$2/env"
fi
exit 0
EOF
chmod +x "$F/tests/lib/rgw.sh"

# t NAME [HEADER] BODY: an integration test that logs its start and end.
t() {
	local name=$1 header=$2 body=$3
	{
		echo '#!/bin/bash'
		[ -n "$header" ] && echo "$header"
		echo "echo \"start $name \$(date +%s%N) \$RGW_DIR\" >>$LOG"
		echo "$body"
		echo "rc=\$?"
		echo "echo \"end $name \$(date +%s%N)\" >>$LOG"
		echo "exit \$rc"
	} >"$F/tests/integration/$name.sh"
}
t 10-long "" "echo long-output; sleep 1.2"
t 11-short "" "sleep 0.5"
t 12-fail "" "echo the-reason >&2; false"
t 13-skip "" "echo 'SKIP: no thing'; (exit 77)"
t 14-own "# gateway: own   (why)" "sleep 0.5"
t 15-excl "# exclusive: it changes what every test shares" "sleep 0.5"
t 16-slow "" "sleep 2.6"
t 17-norow "" "true"
cat >"$F/tests/unit/test_one" <<'EOF'
#!/bin/bash
echo unit-output
EOF
chmod +x "$F/tests/unit/test_one"
cat >"$F/docs/testing.md" <<'EOF'
# fake

## Tiers, times and budgets

| test | tier | typical (s) | budget (s) | typical, sanitizers (s) | budget, sanitizers (s) |
|---|---|---|---|---|---|
| `test_one` | quick | 1 | 30 | 1 | 30 |
| `10-long` | full | 50 | 30 | 50 | 30 |
| `11-short` | quick | 1 | 30 | 1 | 30 |
| `12-fail` | full | 2 | 30 | 2 | 30 |
| `13-skip` | full | 3 | 30 | 3 | 30 |
| `14-own` | full | 4 | 30 | 4 | 30 |
| `15-excl` | quick | 60 | 30 | 60 | 30 |
| `16-slow` | full | 40 | 1 | 40 | 1 |

## Next
EOF

runit() { # OUT [VAR=VALUE...]: the runner on the fake tree
	local out=$1 rc=0
	shift
	env -u FMFS_TESTS -u FMFS_TIER -u FMFS_URING -u FMFS_SKIP_INTEGRATION \
		"$@" bash "$F/tests/run-tests.sh" tests/unit/test_one >"$out" 2>&1 ||
		rc=$?
	echo "$rc"
}

note "the full tier, two at a time"
rc=$(runit full.out FMFS_JOBS=2 FMFS_REQUIRE_INTEGRATION=)
[ "$rc" = 1 ] || fail "runner exited $rc with a failing test, not 1"
[ "$(tail -1 full.out)" = "7 passed, 1 failed, 1 skipped" ] ||
	fail "summary: $(tail -1 full.out)"
grep -qx "failed: 12-fail" full.out || fail "no line naming the failed test"
grep -q "^FAIL: 12-fail (exit 1)" full.out || fail "no FAIL line"
# the whole output of a test, under its name, then its time and result
grep -A1 -x "== 10-long" full.out | grep -qx "long-output" ||
	fail "10-long's output is not under its name"
grep -A2 -x "long-output" full.out | grep -q "^   ([0-9]* s)$" ||
	fail "no wall time after 10-long's output"
grep -A1 -x "== 12-fail" full.out | grep -qx "the-reason" ||
	fail "a failing test's stderr is not in the log"
grep -qx "WARNING: 16-slow took [0-9]* s, over its budget of 1 s (docs/testing.md)" full.out ||
	fail "no budget warning for 16-slow"
grep -q "WARNING: 10-long took" full.out &&
	fail "10-long (1 s, budget 30) warned"
grep -qx "WARNING: 17-norow has no row in docs/testing.md (Tiers, times and budgets)" full.out ||
	fail "no warning for a test without a row"
grep -A10 "^== the ten slowest" full.out | sed -n 2p | grep -q "16-slow" ||
	fail "16-slow is not first of the slowest: $(grep -A3 'ten slowest' full.out)"
python3 - "$LOG" <<'EOF' || fail "the schedule was wrong (events: $LOG)"
import sys
ev = [l.split() for l in open(sys.argv[1]) if l.startswith(("start", "end"))]
run, most, order = set(), 0, []
for e in ev:
    if e[0] == "start":
        run.add(e[1]); order.append(e[1])
        most = max(most, len(run))
        if e[1] == "15-excl":
            assert run == {"15-excl"}, ("15-excl ran beside", run)
            assert len(order) == 8, ("15-excl not last", order)
    else:
        run.discard(e[1])
assert most == 2, ("at most %d at once, not 2" % most)
# longest first by the table: 17-norow (no row: 120), 10-long (50),
# then 16-slow (40) once 17-norow is done
assert set(order[:2]) == {"17-norow", "10-long"}, order
assert order[2] == "16-slow", order
own = [e for e in ev if e[0] == "start" and e[1] == "14-own"][0]
assert own[3].endswith("/14-own.rgw"), ("14-own's gateway", own)
other = [e for e in ev if e[0] == "start" and e[1] == "11-short"][0]
assert not other[3].endswith(".rgw"), ("11-short's gateway", other)
EOF
grep -q "^rgw start .*/14-own.rgw$" "$LOG" || fail "no gateway started for 14-own"
grep -q "^rgw stop .*/14-own.rgw$" "$LOG" || fail "14-own's gateway not stopped"
grep -q "^rgw stop .*/rgw$" "$LOG" || fail "the shared gateway not stopped"

note "a skip fails under FMFS_REQUIRE_INTEGRATION"
: >"$LOG"
rc=$(runit req.out FMFS_REQUIRE_INTEGRATION=1 FMFS_TESTS='1[23]-*')
[ "$rc" = 1 ] || fail "exit $rc"
grep -q "^FAIL: 13-skip" req.out || fail "13-skip was not a failure"
[ "$(tail -1 req.out)" = "1 passed, 2 failed, 0 skipped" ] ||
	fail "summary: $(tail -1 req.out)"

note "the quick tier"
: >"$LOG"
rc=$(runit quick.out FMFS_TIER=quick FMFS_REQUIRE_INTEGRATION=)
[ "$rc" = 0 ] || fail "quick tier exited $rc: $(tail -3 quick.out)"
[ "$(grep '^start' "$LOG" | awk '{print $2}' | sort | tr '\n' ' ')" = "11-short 15-excl " ] ||
	fail "quick tier ran: $(grep '^start' "$LOG" | awk '{print $2}' | tr '\n' ' ')"
grep -q "^PASS: test_one" quick.out || fail "quick tier left out the unit test"

note "bad values"
rc=$(runit bad1.out FMFS_JOBS=x)
[ "$rc" = 2 ] && grep -q "FMFS_JOBS=x: give a number >= 1" bad1.out ||
	fail "FMFS_JOBS=x: exit $rc, $(cat bad1.out)"
rc=$(runit bad2.out FMFS_JOBS=0)
[ "$rc" = 2 ] || fail "FMFS_JOBS=0: exit $rc"
rc=$(runit bad3.out FMFS_TIER=fast)
[ "$rc" = 2 ] && grep -q "FMFS_TIER=fast: give quick or full" bad3.out ||
	fail "FMFS_TIER=fast: exit $rc, $(cat bad3.out)"
echo "runner ok"
