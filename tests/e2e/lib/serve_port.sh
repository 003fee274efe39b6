# e2e helper: serve_port LOG PID [TRIES] waits for `dsinfer serve` (started
# with --port 0, stderr in LOG) to print its address and echoes the port;
# nothing when the process ended or TRIES tenths of a second passed
# (default 600: a minute, for a machine busy with other tests).
serve_port() {
  local log=$1 pid=$2 tries=${3:-600} port=""
  for _ in $(seq 1 "$tries"); do
    port=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$log")
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "$port"
}
