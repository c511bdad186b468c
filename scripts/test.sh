#!/usr/bin/env bash
# make test's steps after deps: go vet and staticcheck over every module
# (vet.sh), every package's tests with the race detector (the root module,
# its Redis lock family's packages a second time with their scripts run by
# EVALSHA instead of FCALL, then cmd/coordctl, examples/ and the etcd backend (etcd/), modules of
# their own, each adapter in contrib/, and the chaos checker's own), and the
# chaos checker's short profile. Each step runs even when an earlier one
# failed. While the tests run, gotestsum (pinned in tools.sh) prints a line
# per package as it ends, numbered against the packages to test;
# at the end of the step, under "=== Failed", each failing test's own lines
# in full (and a failed package's output outside its tests, such as a
# leaked goroutine's report), never a passing test's. The script ends with
# one summary: each step's verdict and time, the failed packages and tests,
# the chaos verdict, the time taken, and "packages: N passed, M failed"; it
# exits non-zero if any step failed.
#
# Knobs (environment): STEPS, the steps to run, as shell patterns
# ("vet packages", "contrib/*"; default all); PKGS, the root module's
# packages to test (default ./...); CHAOS_SEED (default 1); GO.
# shellcheck disable=SC2317 # the functions run through step
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
GO=${GO:-go}
CHAOS_SEED=${CHAOS_SEED:-1}
out=$(mktemp -d "${TMPDIR:-/tmp}/coordkit-test-XXXXXX")
begin=$SECONDS
status=0
summary=()     # one line per step
failed_pkgs=() # "module-relative/package" of every failed package
failed_tests=()
passed=0
chaos_verdict="not run"

./scripts/tools.sh || exit 1
gotestsum=$PWD/bin/gotestsum

# step NAME COMMAND...: runs COMMAND unless STEPS leaves NAME out, and
# records its verdict and time.
step() {
	local name=$1 t0=$SECONDS pat selected=${STEPS:+no}
	shift
	set -f
	for pat in ${STEPS:-}; do
		# shellcheck disable=SC2053 # pat is a pattern
		[[ $name == $pat ]] && selected=
	done
	set +f
	if [ -n "$selected" ]; then
		summary+=("skip  $name (not in STEPS)")
		return
	fi
	echo
	echo "== $name"
	if "$@"; then
		summary+=("ok    $name ($((SECONDS - t0)) s)")
	else
		summary+=("FAIL  $name ($((SECONDS - t0)) s)")
		status=1
	fi
}

# gotest DIR [PKG...]: the tests of the module in DIR (its ./... by
# default) with the race detector, four packages at a time on two cores
# (the tests mostly wait on their servers and timers: the root module's
# took 423 s at the default two, 304 s at three; at three, with the vet
# and the other modules beside them, 466 s of a make test of 649 s, the
# CPUs busy 69 % of it, 2026-11-27).
gotest() {
	local dir=$1 json rc total
	shift
	local pkgs=("$@")
	[ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)
	json=$(gojson "$dir")
	total=$(cd "$dir" && "$GO" list -e "${pkgs[@]}" | grep -c .)
	(cd "$dir" && "$gotestsum" --format pkgname --format-icons text \
		--hide-summary skipped --jsonfile "$json" --raw-command -- \
		"$GO" test -json -race -count=1 -p 4 -timeout 20m "${pkgs[@]}") | progress "$total"
	rc=${PIPESTATUS[0]}
	[ -n "${NO_TALLY:-}" ] || tally "$dir" "$json"
	return "$rc"
}

# longest_first: the root module's packages, the longest-running first (by
# .ci/run of 2026-11-27: idgen/sqlid 216 s, idgen/workerid 212 s, lock 119 s,
# ...), then the others as go list gives them. go test starts the packages'
# tests in the order it is given, four at a time: in go list's order the
# long ones started last (sqllock at 379 s, lock at 311 s of a 495 s run)
# and made its tail.
longest_first() {
	local p all first=(idgen/sqlid idgen/workerid lock idgen/redisid sqllock election
		internal/readme internal/testserver internal/contract zklock redlock semaphore
		idgen txn internal/modeltest)
	all=$("$GO" list ./...) || return 1
	for p in "${first[@]}"; do
		grep -qx "github.com/coordkit/coordkit/$p" <<<"$all" && echo "./$p"
	done
	grep -vxF -f <(printf 'github.com/coordkit/coordkit/%s\n' "${first[@]}") <<<"$all" |
		sed 's|^github.com/coordkit/coordkit|.|'
}

# gojson DIR: the JSON file gotest writes for DIR (and GOJSON_TAG, a
# second run of its packages).
gojson() { echo "$out/$(echo "$1${GOJSON_TAG:-}" | tr -c 'A-Za-z0-9\n' _).json"; }

# evalsha: the Redis lock family's packages again, their scripts run by
# EVALSHA (COORDKIT_REDIS_FUNCTIONS=off) where the first run used the Redis
# Functions library (FCALL): both paths pass the same tests (issue 35).
evalsha() {
	COORDKIT_REDIS_FUNCTIONS=off GOJSON_TAG=-evalsha gotest . ./lock ./redlock ./semaphore \
		./internal/hashlock ./internal/modeltest ./internal/redisfn
}

# progress TOTAL: numbers gotestsum's line for each package as it ends
# (SKIP: a package without tests).
progress() {
	awk -v total="$1" '/^(PASS|FAIL|SKIP)  [^ ]/ { n++; printf "[%d/%s] %s\n", n, total, $0; fflush(); next }
		{ print; fflush() }'
}

# tally DIR JSON: counts the packages that passed and failed in go test's
# events, and names the failed packages and tests.
tally() {
	local dir=$1 json=$2 prefix line
	prefix=$(cd "$dir" && "$GO" list -m -f '{{.Path}}')/
	[ -f "$json" ] || return 0
	passed=$((passed + $(grep -cE '"Action":"pass","Package":"[^"]*","Elapsed"' "$json")))
	while read -r line; do
		failed_pkgs+=("${line#"$prefix"}")
	done < <(sed -nE 's/.*"Action":"fail","Package":"([^"]*)","Elapsed".*/\1/p' "$json" | sort -u)
	while read -r line; do
		failed_tests+=("${line#"$prefix"}")
	done < <(sed -nE 's/.*"Action":"fail","Package":"([^"]*)","Test":"([^"]*)".*/\1 \2/p' "$json")
}

# chaos_short: the chaos checker's short profile (its seven backends, at
# most 4 minutes), then etcd's short run (a 3-member cluster, about 40 s;
# issue 33: the etcd backend in make test); the verdict per backend from
# the report headings ("### lock, seed 1: PASS").
chaos_short() {
	local rc rc2 log=$out/chaos-short.log
	(cd chaos && "$GO" run . -profile short -seed "$CHAOS_SEED") 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	(cd chaos && "$GO" run . -profile short -backend etcd -seed "$CHAOS_SEED") 2>&1 | tee -a "$log"
	rc2=${PIPESTATUS[0]}
	# the worse of the two: 0 pass, 1 anomalies, else did not finish
	if [ "$rc" -eq 0 ] || { [ "$rc" -eq 1 ] && [ "$rc2" -ne 0 ]; }; then
		rc=$rc2
	fi
	chaos_verdict=$(sed -nE 's/^### ([^,]+), seed [0-9]+: (PASS|FAIL)$/\1 \2/p' "$log" | paste -sd, - | sed 's/,/, /g')
	case $rc in
	0) chaos_verdict="PASS (seed $CHAOS_SEED: $chaos_verdict)" ;;
	1) chaos_verdict="FAIL, anomalies (seed $CHAOS_SEED: $chaos_verdict)" ;;
	*) chaos_verdict="FAIL, did not finish: exit $rc (seed $CHAOS_SEED${chaos_verdict:+: $chaos_verdict}); its output: $log" ;;
	esac
	echo "$chaos_verdict" > "$out/chaos-verdict" # read by the shell that ran it beside
	return "$rc"
}

# beside NAME COMMAND...: starts COMMAND in the background (unless STEPS
# leaves NAME out), its output kept in a file; collect prints it and
# records its verdict and time. The tests mostly wait on their servers and
# timers, so the vet and the other modules' tests run beside the root
# module's: .ci/run took 694 s with every step in turn, over its 10
# minutes (2026-11-27); 625 s with the vet and the modules beside, the
# chaos checker's short profile (179 s) after them.
declare -A bg_pid bg_t0
beside() {
	local name=$1 pat selected=${STEPS:+no} log
	shift
	set -f
	for pat in ${STEPS:-}; do
		# shellcheck disable=SC2053 # pat is a pattern
		[[ $name == $pat ]] && selected=
	done
	set +f
	[ -z "$selected" ] || return 0
	log=$out/beside-$(echo "$name" | tr -c 'A-Za-z0-9\n' _).log
	bg_t0[$name]=$SECONDS
	NO_TALLY=1 "$@" > "$log" 2>&1 &
	bg_pid[$name]=$!
}

# collect NAME [DIR]: waits for NAME's background command, prints its
# output, records its verdict and its time from its start; DIR: a gotest
# whose packages are tallied.
collect() {
	local name=$1 dir=${2:-} rc
	[ -n "${bg_pid[$name]:-}" ] || { summary+=("skip  $name (not in STEPS)"); return 0; }
	wait "${bg_pid[$name]}"
	rc=$?
	echo
	echo "== $name (ran beside the root module's tests)"
	cat "$out/beside-$(echo "$name" | tr -c 'A-Za-z0-9\n' _).log"
	[ -z "$dir" ] || tally "$dir" "$(gojson "$dir")"
	if [ "$rc" -eq 0 ]; then
		summary+=("ok    $name ($((SECONDS - bg_t0[$name])) s, beside)")
	else
		summary+=("FAIL  $name ($((SECONDS - bg_t0[$name])) s, beside)")
		status=1
	fi
}

# others: the modules of their own, in turn: the CLI and the example
# programs, the etcd backend, the adapters, the chaos checker's tests.
others() {
	local m rc=0
	for m in cmd/coordctl examples etcd contrib/*/ chaos; do
		m=${m%/}
		echo "-- $m"
		gotest "$m" || rc=1
	done
	return "$rc"
}

beside vet ./scripts/vet.sh
beside modules others
# The chaos checker's short profile too: its clients are processes of their
# own, and its report bounds allow for a loaded host (chaos/README.md).
beside chaos-short chaos_short
# shellcheck disable=SC2086 # PKGS is a list
step packages gotest . ${PKGS:-$(longest_first)}
step evalsha evalsha
collect vet
collect modules
for m in cmd/coordctl examples etcd contrib/*/ chaos; do
	[ -z "${bg_pid[modules]:-}" ] || tally "${m%/}" "$(gojson "${m%/}")"
done
collect chaos-short
[ ! -f "$out/chaos-verdict" ] || chaos_verdict=$(cat "$out/chaos-verdict")

echo
echo "== summary ($((SECONDS - begin)) s)"
printf '%s\n' "${summary[@]}"
if [ ${#failed_pkgs[@]} -gt 0 ]; then
	echo "failed packages (their failing tests' own lines are above, under '=== Failed' at the end of their step):"
	printf '  %s\n' "${failed_pkgs[@]}"
fi
if [ ${#failed_tests[@]} -gt 0 ]; then
	echo "failed tests:"
	printf '  %s\n' "${failed_tests[@]}"
fi
echo "chaos-short: $chaos_verdict"
echo "time taken: $(((SECONDS - begin) / 60)) min $(((SECONDS - begin) % 60)) s; output of this run: $out"
echo "packages: $passed passed, ${#failed_pkgs[@]} failed"
exit $status
