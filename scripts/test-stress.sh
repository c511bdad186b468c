#!/usr/bin/env bash
# make test-stress: make test RUNS (5) times in a row beside a CPU burner
# that keeps every core busy (one `yes > /dev/null` per core, started and
# stopped by this script by PID), then once pinned to one core (taskset -c
# 0) without the burner. Each run's output goes to a log file; after each
# run the script prints its verdict, its time and the end of its summary,
# and at the end every run's line (also in summary.txt beside the logs). It
# exits non-zero if any run failed. About an hour on 2 cores: not part of
# make test.
#
# Knobs (environment): RUNS (5), BURNERS (one per core), PINNED (1: the
# pinned run; 0: none), STRESS_OUT (the directory for the logs; default a
# new temporary one), MAKE.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
MAKE=${MAKE:-make}
RUNS=${RUNS:-5}
BURNERS=${BURNERS:-$(nproc)}
PINNED=${PINNED:-1}
out=${STRESS_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/coordkit-stress-XXXXXX")}
mkdir -p "$out"
status=0
results=()
burners=()

start_burners() {
	local i
	for ((i = 0; i < BURNERS; i++)); do
		yes >/dev/null &
		burners+=($!)
	done
	echo "stress: $BURNERS CPU burners running (pids ${burners[*]})"
}

stop_burners() {
	local pid
	for pid in "${burners[@]}"; do
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	[ ${#burners[@]} -eq 0 ] || echo "stress: CPU burners stopped (pids ${burners[*]})"
	burners=()
}
trap stop_burners EXIT
trap 'exit 130' INT TERM # the EXIT trap stops the burners

# run NAME COMMAND...: one make test, its output in NAME.log.
run() {
	local name=$1 t0=$SECONDS rc verdict log=$out/$1.log
	shift
	echo
	echo "== stress: $name: $* (output in $log)"
	"$@" >"$log" 2>&1
	rc=$?
	verdict=passed
	if [ $rc -ne 0 ]; then
		verdict="FAILED (exit $rc)"
		status=1
	fi
	results+=("$name: $verdict in $((SECONDS - t0)) s; $(grep -E '^packages: ' "$log" | tail -1)")
	sed -n '/^== summary/,$p' "$log"
	echo "${results[-1]}"
}

begin=$SECONDS
if [ "$RUNS" -gt 0 ]; then
	start_burners
	for ((i = 1; i <= RUNS; i++)); do
		run "loaded-$i" "$MAKE" --no-print-directory test
	done
	stop_burners
fi
if [ "$PINNED" = 1 ]; then
	if command -v taskset >/dev/null 2>&1; then
		run pinned-cpu0 taskset -c 0 "$MAKE" --no-print-directory test
	else
		results+=("pinned-cpu0: FAILED: taskset not found (apt-get install -y util-linux)")
		status=1
	fi
fi

failed=0
for r in "${results[@]}"; do
	case $r in *": FAILED"*) failed=$((failed + 1)) ;; esac
done
{
	pinned="no run pinned"
	[ "$PINNED" = 1 ] && pinned="one pinned to CPU 0"
	echo "== stress summary ($((SECONDS - begin)) s; $RUNS runs beside $BURNERS CPU burners, then $pinned; logs in $out)"
	printf '%s\n' "${results[@]}"
	echo "stress: $((${#results[@]} - failed)) passed, $failed failed"
} | tee "$out/summary.txt"
exit $status
