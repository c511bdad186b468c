#!/usr/bin/env bash
# make test's steps after deps and vet: every package's tests with the race
# detector (the root module, then cmd/coordctl and examples/, modules of
# their own), the adapters (contrib), the chaos checker's short profile. Each
# step runs even when an earlier one failed; the script ends with one
# summary (packages passed and failed, which failed, the chaos verdict, the
# time each step took) and exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
MAKE=${MAKE:-make}
log=$(mktemp -d)/go-test.log
status=0
summary=()
begin=$(date +%s)

step() { # step NAME COMMAND...: runs it, records its verdict and time
	local name=$1 t0=$SECONDS
	shift
	echo "== $name"
	if "$@"; then
		summary+=("ok    $name ($((SECONDS - t0)) s)")
	else
		summary+=("FAIL  $name ($((SECONDS - t0)) s)")
		status=1
	fi
}

# Three packages at a time on two cores: the tests mostly wait on their
# servers and timers (423 s at the default two, 304 s at three, 2026-11-27).
gotest() {
	$GO test -race -count=1 -p 3 -timeout 20m ./... 2>&1 | tee "$log"
}
# cmd/coordctl and examples/ are modules of their own: their packages go
# into the same log, and so into the summary's counts.
modtest() {
	local rc=0 m
	for m in cmd/coordctl examples; do
		(cd "$m" && $GO test -race -count=1 -timeout 20m ./...) 2>&1 | tee -a "$log" || rc=1
	done
	return $rc
}
step "go test ./... (race)" gotest
step "go test cmd/coordctl examples (race)" modtest
step "contrib" $MAKE --no-print-directory contrib
step "chaos-short" $MAKE --no-print-directory chaos-short

passed=$(grep -cE '^ok[[:space:]]' "$log")
failed_pkgs=$(grep -E '^FAIL[[:space:]]+[^[:space:]]+' "$log" | awk '{print $2}' | sort -u)
failed=0
[ -n "$failed_pkgs" ] && failed=$(echo "$failed_pkgs" | wc -l)
echo
echo "== summary ($(( $(date +%s) - begin )) s)"
printf '%s\n' "${summary[@]}"
if [ -n "$failed_pkgs" ]; then
	echo "failed packages (their own output is above, under '--- FAIL'):"
	echo "$failed_pkgs" | sed 's/^/  /'
fi
echo "packages: $passed passed, $failed failed"
exit $status
