#!/usr/bin/env bash
# Fails when the tests wrote into the source tree. Tests write under
# t.TempDir(), never next to the sources; a file they leave behind is a
# leftover someone will commit.
#
#   tools/ci/clean-tree.sh snapshot   # before the tests: record the tree
#   tools/ci/clean-tree.sh check      # after them: fail on anything new
#
# The snapshot lists every path git reports, modified, untracked or
# ignored (an ignored leftover is still a leftover), so that files already
# there (bin/, a developer's edits) are not blamed on the tests. Without a
# snapshot, check fails on any change at all, as CI's fresh checkout has none.
set -euo pipefail
cd "$(dirname "$0")/../.."
snap="${CLEAN_TREE_SNAPSHOT:-${TMPDIR:-/tmp}/bpfbench-clean-tree.$(id -u)}"

state() {
	# Untracked and ignored files one by one; modified tracked files with
	# their content hash, so that a test rewriting a tracked file shows.
	git status --porcelain=v1 -z --untracked-files=all --ignored=matching |
		tr '\0' '\n' | sed -n 's/^\(..\) \(.*\)$/\1 \2/p' | sort -u |
		while IFS= read -r line; do
			p="${line:3}"
			if [ -f "$p" ] && [ "${line:0:2}" != "!!" ] && [ "${line:0:2}" != "??" ]; then
				echo "$line $(git hash-object -- "$p")"
			else
				echo "$line"
			fi
		done
}

case "${1:-check}" in
snapshot)
	state >"$snap"
	echo "clean-tree: snapshot of $(wc -l <"$snap") paths in $snap"
	;;
check)
	now=$(mktemp)
	trap 'rm -f "$now"' EXIT
	state >"$now"
	if [ -f "$snap" ]; then
		new=$(comm -13 "$snap" "$now" | grep -v -E '^(!!|\?\?) (bin/|report-samples/)' || true)
	else
		new=$(cat "$now")
	fi
	if [ -n "$new" ]; then
		echo "clean-tree: the tests wrote into the source tree:"
		echo "$new"
		exit 1
	fi
	echo "clean-tree: nothing written into the source tree"
	;;
*)
	echo "usage: $0 snapshot|check" >&2
	exit 2
	;;
esac
