#!/usr/bin/env bash
# report.sh VERSION...: the matrix's table from $KERNELS_OUT/VERSION.log
# and VERSION.parallel.log (init.sh's markers; see run.sh's KERNELS_VCPUS) and tests.txt's expectations, printed and written to
# $KERNELS_OUT/table.txt. Exit status 1 when a test expected to pass did
# not, or one expected to be refused was not.
#
# A cell: PASS/FAIL/SKIP and seconds; "refused" (expected and refused),
# "NOT REFUSED"; "xfail"/"XPASS" for known failures; "-" not run on that
# kernel; "NO RESULT" when the VM ended first (crash, timeout).
set -euo pipefail
. "$(dirname "$0")/common.sh"

(($#)) || die "usage: report.sh VERSION..."
kernels=("$@")
bad=0
# logs K: kernel K's consoles, the serial phase's first.
logs() {
	cat "$KERNELS_OUT/$1.log" "$KERNELS_OUT/$1.parallel.log" 2>/dev/null || true
}
{
	printf '%-18s' test
	for k in "${kernels[@]}"; do printf ' %-24s' "$k"; done
	echo
	while read -r name pkg timeout expect rest; do
		[[ -z $name || $name == \#* ]] && continue
		[[ -n ${TESTS:-} && ! $name =~ $TESTS ]] && continue
		printf '%-18s' "$name"
		for k in "${kernels[@]}"; do
			exp=pass
			for e in ${expect//,/ }; do
				case $e in "$k="*) exp=${e#*=}; break ;; "*="*) exp=${e#*=} ;; esac
			done
			r=$(awk -v n="$name" '$1 == "@@RESULT" && $2 == n {print $3, $4, $6; exit}' <(logs "$k"))
			res=${r%% *} secs=${r#* }
			tries=${secs#* } secs=${secs%% *}
			# A test that passed on its second try says so: "2.88s, 2nd try".
			note=""
			[[ $tries == tries=2 ]] && note=", 2nd try"
			case $exp:$res in
			skip:*) cell=- ;;
			*:) cell="NO RESULT" bad=1 ;;
			pass:PASS) cell="PASS ${secs}s$note" ;;
			refuse:FAIL) cell="refused ${secs}s" ;;
			refuse:*) cell="NOT REFUSED" bad=1 ;;
			xfail:PASS) cell="XPASS ${secs}s$note" ;;
			xfail:*) cell="xfail ${secs}s" ;;
			*) cell="$res ${secs}s" bad=1 ;;
			esac
			printf ' %-24s' "$cell"
		done
		echo
	done <"$KERNELS_DIR/tests.txt"
	echo
	# The VM's own line per kernel: its kernel, BTF, boot-to-poweroff time.
	for k in "${kernels[@]}"; do
		printf '%-6s %s; %s\n' "$k" \
			"$(grep -o -m1 '@@KERNEL.*' "$KERNELS_OUT/$k.log" 2>/dev/null | cut -d' ' -f2- || echo 'no boot')" \
			"$(logs "$k" | grep '^@@VM' | cut -d' ' -f3- | paste -sd';' | sed 's/;/; parallel VM: /' || true)"
		[[ -f $KERNELS_OUT/$k.parallel.crashed.log ]] &&
			echo "       the parallel VM was booted twice: the first ended before its plan (console in $k.parallel.crashed.log)"
	done
	# Per kernel: the modules the kernel asked for and the VM lacked, the
	# refusals' messages (bpfbench's error line), and `bpfbench check`'s
	# lines (status, feature, detail; the fix left out).
	for k in "${kernels[@]}"; do
		echo
		echo "== $k"
		logs "$k" | grep '^@@MODPROBE' | sort | uniq -c | sed 's/^/  missing module: /' || true
		awk '$1 == "@@BEGIN" {name = $2; next}
			$1 == "@@RESULT" {if (msg[name] != "") print "  " name ": " substr(msg[name], 1, 200); name = ""; next}
			name != "" && /^bpfbench [a-z]+: / {msg[name] = $0}' <(logs "$k")
		awk '$1 == "@@BEGIN" && $2 == "check" {on = 1; next}
			$1 == "@@RESULT" {on = 0}
			on && /^(ok|warn|fail) / {sub(/  fix: .*/, ""); sub(/ +$/, ""); print "  " substr($0, 1, 160)}' \
			"$KERNELS_OUT/$k.log" 2>/dev/null || true
	done
} >"$KERNELS_OUT/table.txt" # not a pipe: bad is set in this shell
cat "$KERNELS_OUT/table.txt"
exit $bad
