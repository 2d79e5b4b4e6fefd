#!/bin/sh
# check_cli.sh BUILD_DIR -- the command lines of hh-viz, hh-demo and hh-replay
# (tools/hh_cli.h conventions): --help and --version, --opt=value and --opt value,
# errors that name the option, the reason and the accepted range, file errors
# with their reason, an empty frame range, a directory or a non-trace given to
# hh-replay. Run by `make check-cli`; prints one line per case, then a count.
set -u
B=${1:?usage: check_cli.sh BUILD_DIR}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0
fail=0

# expect NAME RC PATTERN CMD...: CMD exits RC and its stdout+stderr match the
# extended regex PATTERN (empty: the exit status alone counts).
expect() {
    name=$1 rc_want=$2 pat=$3
    shift 3
    "$@" >"$T/out" 2>&1
    rc=$?
    if [ "$rc" -eq "$rc_want" ] && { [ -z "$pat" ] || grep -Eq -- "$pat" "$T/out"; }; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "  FAIL: $name: exit $rc (want $rc_want), output lacks /$pat/:"
        sed 's/^/    | /' "$T/out" | head -8
    fi
}

# A small dump and trace to work on (20 frames, no pictures).
"$B/hh-demo" --frames 20 --heap-mib 2 --seed 3 --no-render --quiet --out "$T/d" >/dev/null 2>&1 \
    || { echo "check_cli: hh-demo could not make the test dump"; exit 1; }
D=$T/d/demo.hhmap
TR=$T/d/demo.hhtrace
printf 'not a trace, not a dump\n' >"$T/junk"

for tool in hh-viz hh-demo hh-replay; do
    expect "$tool --help exits 0 with every option and its default" 0 '^usage: '"$tool"' \[options\]' "$B/$tool" --help
    n_opts=$("$B/$tool" --help | grep -c '^  .*--')
    n_defs=$("$B/$tool" --help | grep -c '(default: ')
    expect "$tool --help: a default for each option (not -h/-V)" 0 '' test "$n_defs" -eq $((n_opts - 2))
    expect "$tool -h" 0 '^usage: ' "$B/$tool" -h
    expect "$tool --version" 0 "^$tool \(hheap\) [0-9]+\.[0-9]+\.[0-9]+$" "$B/$tool" --version
    expect "$tool -V" 0 "^$tool \(hheap\) " "$B/$tool" -V
    expect "$tool unknown option" 2 "^$tool: unknown option --bogus$" "$B/$tool" --bogus
    expect "$tool unknown option=value" 2 "^$tool: unknown option --bogus=1$" "$B/$tool" --bogus=1
done

# hh-viz
V=$B/hh-viz
expect "hh-viz --out without a value" 2 '^hh-viz: option --out needs a value \(DIR\)$' "$V" "$D" --out
expect "hh-viz --width out of range" 2 "^hh-viz: --width '100': out of range \(accepted: 480\.\.8192\)$" "$V" --width 100 "$D"
expect "hh-viz --width=abc" 2 "^hh-viz: --width 'abc': not a whole number \(accepted: 480\.\.8192\)$" "$V" --width=abc "$D"
expect "hh-viz --every 0" 2 "^hh-viz: --every '0': out of range \(accepted: 1\.\.1000000\)$" "$V" --every 0 "$D"
expect "hh-viz --frames without a colon" 2 "^hh-viz: --frames '12': wants A:B" "$V" --frames 12 "$D"
expect "hh-viz --frames A > B" 2 "^hh-viz: --frames '5:2': the range is empty" "$V" --frames=5:2 "$D"
expect "hh-viz --frames past the dump" 2 \
    "^hh-viz: --frames 9999:10000: no frame of .*demo.hhmap is in that range \(it has frames 0\.\.19\)$" \
    "$V" --frames 9999:10000 --out "$T/v0" "$D"
expect "hh-viz: an empty range draws nothing" 0 '' test ! -e "$T/v0"
expect "hh-viz --quiet=1 (a flag given a value)" 2 '^hh-viz: option --quiet takes no value' "$V" --quiet=1 "$D"
expect "hh-viz missing dump: the reason" 1 "cannot open '$T/none.hhmap': No such file or directory" "$V" --out "$T/v1" "$T/none.hhmap"
expect "hh-viz a directory" 1 "'$T' is a directory, not a .hhmap file" "$V" --out "$T/v1" "$T"
expect "hh-viz no dump" 2 '^hh-viz: no dump given$' "$V"
expect "hh-viz two dumps" 2 '^hh-viz: more than one dump given$' "$V" "$D" "$D"
expect "hh-viz --opt=value and --opt value, options after the operand" 0 '' \
    "$V" "$D" --quiet --no-progress --out="$T/v2" --frames 4:6 --width=480 --every 2
expect "hh-viz --frames 4:6 --every 2 drew frames 4 and 6" 0 '' \
    test -s "$T/v2/frames/frame_000004.png" -a -s "$T/v2/frames/frame_000006.png" -a ! -e "$T/v2/frames/frame_000005.png"
expect "hh-viz -o DIR -w PX (short forms)" 0 '' "$V" -q --no-progress --no-frames -o "$T/v3" -w 640 "$D"
expect "hh-viz -o wrote the summary pictures" 0 '' test -s "$T/v3/timeline.png" -a -s "$T/v3/index.html"
expect "hh-viz unwritable --out: the reason" 1 "^hh-viz: cannot create $T/junk/x: Not a directory$" "$V" --quiet --out "$T/junk/x" "$D"

# hh-demo
M=$B/hh-demo
expect "hh-demo --frames=5x" 2 "^hh-demo: --frames '5x': not a whole number \(accepted: 1\.\.1000000\)$" "$M" --frames=5x
expect "hh-demo --frames 0" 2 "^hh-demo: --frames '0': out of range \(accepted: 1\.\.1000000\)$" "$M" --frames 0
expect "hh-demo --heap-mib 5000" 2 "^hh-demo: --heap-mib '5000': out of range \(accepted: 1\.\.4096\)$" "$M" --heap-mib=5000
expect "hh-demo --moves -1" 2 "^hh-demo: --moves '-1': not a whole number \(accepted: 0\.\.1000000\)$" "$M" --moves -1
expect "hh-demo --policy best" 2 "^hh-demo: --policy 'best': not a policy \(accepted: auto, slide, fill\)$" "$M" --policy best
expect "hh-demo --policy without a value" 2 '^hh-demo: option --policy needs a value \(P\)$' "$M" --policy
expect "hh-demo an operand" 2 '^hh-demo: hh-demo takes no operands$' "$M" extra
expect "hh-demo --moves unlimited" 0 'moves/frame' "$M" --moves unlimited --frames=3 --heap-mib 1 --no-render --quiet --out "$T/m1"
expect "hh-demo --frames=3 ran 3 frames" 0 '\| frames +\| +3 \|' "$M" --frames=3 --heap-mib=1 --no-render --quiet --out="$T/m2"
expect "hh-demo unwritable --out: the reason" 1 "cannot create '$T/junk/x/demo.hhmap': Not a directory" \
    "$M" --frames 2 --heap-mib 1 --no-render --quiet --out "$T/junk/x"

# hh-replay
R=$B/hh-replay
expect "hh-replay a directory" 2 "^hh-replay: hh_trace_load: $T is a directory, not a trace file$" "$R" "$T"
expect "hh-replay a non-trace file" 2 "^hh-replay: hh_trace_load: $T/junk is not an hheap trace$" "$R" "$T/junk"
expect "hh-replay a missing file: the reason" 2 "cannot open $T/none: No such file or directory$" "$R" "$T/none"
# The reason given, and no other (a negated grep passed on a crash with no output).
expect "hh-replay: no 'out of memory' for a directory" 0 '^ok$' \
    sh -c "out=\$('$R' '$T' 2>&1); case \$out in *'is a directory'*) ;; *) exit 1;; esac; case \$out in *'out of memory'*|*'no memory'*) exit 1;; esac; echo ok"
expect "hh-replay --reps 0" 2 "^hh-replay: --reps '0': out of range \(accepted: 1\.\.64\)$" "$R" --reps 0 "$TR"
expect "hh-replay -r without a value" 2 '^hh-replay: option --reps needs a value \(N\)$' "$R" "$TR" -r
expect "hh-replay no trace" 2 '^hh-replay: no trace given$' "$R"
expect "hh-replay --reps=1 TRACE" 0 'final state IDENTICAL' "$R" --reps=1 "$TR"
expect "hh-replay TRACE -r 1" 0 'final state IDENTICAL' "$R" "$TR" -r 1

echo "  cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
