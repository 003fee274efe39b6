# tests/e2e: the checks the end-to-end scripts share (sourced, not a test).
# ok / bad count passes and failures; finish prints them and fails the
# script when anything failed.
fails=0 passes=0
ok() { passes=$((passes + 1)); }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect CODE NEEDLE -- command...: the exit code, a stderr line containing
# NEEDLE, within 60 s (a hang fails), and no signal (a crash fails)
expect() {
  local code=$1 needle=$2; shift 3
  local out rc
  out=$(timeout 60 "$@" 2>&1 >/dev/null); rc=$?
  if [ "$rc" -eq 124 ]; then bad "hung: $*"; return; fi
  if [ "$rc" -ne "$code" ]; then bad "exit $rc (want $code): $* :: $out"; return; fi
  if [ -n "$needle" ] && ! grep -qF -- "$needle" <<<"$out"; then bad "no '$needle' in: $out ($*)"; return; fi
  if [ "$rc" -ge 128 ]; then bad "crashed: $*"; return; fi
  ok
}

finish() {
  echo "$passes passed, $fails failed"
  [ "$fails" -eq 0 ]
}
