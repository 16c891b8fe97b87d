#!/usr/bin/env bash
# fuzz.sh FUZZTIME DIR:FuzzName... runs each fuzz target for FUZZTIME on top of its seed
# corpus and fails on the first target that fails.
#
# Go 1.26's fuzz coordinator can report a bare "context deadline exceeded" when
# -fuzztime runs out while a worker is mid-call (go.dev/issue/75804, fixed in Go 1.27):
# nothing was found and no failing input was written. Such a run is repeated once, for
# as many inputs as it had tried (-fuzztime Nx): a count sets no deadline, so the race
# cannot end it again (a second timed run did, on a loaded CI machine). A failing input,
# a panic or any other failure fails at once.
set -uo pipefail
fuzztime=$1; shift
log=$(mktemp); trap 'rm -f "$log"' EXIT

# race says whether the log is the coordinator's deadline race and nothing else: one
# failing test, whose only message is the deadline, no failing input, no panic.
race() {
	! grep -qE 'Failing input written|panic:' "$log" &&
		[ "$(grep -c -- '--- FAIL' "$log")" = 1 ] &&
		[ "$(grep -A1 -- '--- FAIL' "$log" | tail -1 | tr -d '[:space:]')" = contextdeadlineexceeded ] &&
		[ "$(grep -A2 -- '--- FAIL' "$log" | tail -1 | tr -d '[:space:]')" = FAIL ]
}

for t in "$@"; do
	dir=${t%%:*}; fn=${t##*:}
	budget=$fuzztime
	for attempt in 1 2; do
		if (cd "$dir" && go test -run '^$' -fuzz "^$fn\$" -fuzztime "$budget" .) >"$log" 2>&1; then
			# go test passes when the name matches no fuzz test.
			if grep -q 'no fuzz tests to fuzz' "$log"; then
				echo "fuzz $t: no such fuzz test in $dir" >&2
				exit 1
			fi
			echo "fuzz $t: ok"
			continue 2
		fi
		if [ "$attempt" = 1 ] && race; then
			execs=$(grep -oE 'execs: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || true)
			budget="$(( ${execs:-0} > 1000 ? ${execs:-0} : 1000 ))x"
			echo "fuzz $t: the fuzz coordinator's deadline race (go.dev/issue/75804), nothing found; running it again for $budget inputs"
			continue
		fi
		cat "$log"
		echo "fuzz $t failed"
		exit 1
	done
done
