#!/usr/bin/env bash
# Installs the Go tools that make test runs, at the versions pinned here,
# into bin/ (ignored by git) with go install, through the Go module proxy:
# staticcheck (vet.sh runs it beside go vet) and gotestsum (test.sh's
# progress lines). A tool already in bin/ at its pinned version is kept.
set -euo pipefail
cd "$(dirname "$0")/.." || exit 1
GO=${GO:-go}
bin=$PWD/bin
tools=(
	honnef.co/go/tools/cmd/staticcheck@v0.8.2 # staticcheck 2026.2.2
	gotest.tools/gotestsum@v1.13.0
)
for t in "${tools[@]}"; do
	pkg=${t%@*} ver=${t#*@}
	name=${pkg##*/}
	mod=$("$GO" version -m "$bin/$name" 2>/dev/null | awk '$1 == "mod" {print $3}') || true
	if [ "$mod" = "$ver" ]; then
		continue
	fi
	echo "tools: installing $name $ver into bin/"
	GOBIN=$bin "$GO" install "$t"
done
