#!/usr/bin/env bash
# go vet and staticcheck (pinned in tools.sh) over every package of each
# module given as DIR or DIR:TAGS (build tags, comma-separated), by default
# every module make test tests: the root module (the library), cmd/coordctl
# and examples/, the etcd backend (etcd/), the adapters (contrib/*), the
# chaos checker, and chaos built with its chaosbroken tag. bench/ (make
# bench's peers) is not part of make test and not vetted here. Every module
# is vetted even when one fails; the exit status is non-zero if any did.
#
# Both build with the race detector, as make test's tests do: go vet and
# staticcheck then read the export data of the very packages the tests
# compile (no build tag of the project depends on race). Without it, an
# empty build cache compiled the standard library and every dependency a
# second time, without -race: 235 packages for ./lock alone, and 4 min
# for staticcheck over ./idgen after its race build, against 10 s with
# it (2026-11-27, a loaded 2-core machine).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
GO=${GO:-go}
./scripts/tools.sh || exit 1
staticcheck=$PWD/bin/staticcheck

if [ $# -eq 0 ]; then
	set -- . cmd/coordctl examples etcd contrib/*/ chaos chaos:chaosbroken
fi
status=0
for m in "$@"; do
	dir=${m%%:*} tags=
	[ "$dir" != "$m" ] && tags=${m#*:}
	dir=${dir%/}
	label=$dir${tags:+ (tags $tags)}
	if (cd "$dir" && "$GO" vet -race ${tags:+-tags "$tags"} ./... && GOFLAGS="${GOFLAGS:+$GOFLAGS }-race" "$staticcheck" ${tags:+-tags "$tags"} ./...); then
		echo "vet: $label: go vet and staticcheck clean"
	else
		echo "vet: $label: FAILED (findings above)"
		status=1
	fi
done
exit $status
