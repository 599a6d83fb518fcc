#!/usr/bin/env bash
# One multi-host ctest case: makes the test hosts (hosts.sh), runs the case across them with mpirun, checks
# its output, removes the hosts. Exit 0 pass, 1 fail, 77 skipped (no namespaces here: the reason is
# printed). Cases and their arguments (paths of the built programs):
#   launch_demo EXE         3 hosts x 1 rank: the all-reduce's closed form on every rank, 3 host names
#   ddp_digits EXE          2 hosts x 1 rank against mpirun -np 2 on one host: the same epoch lines
#   zero PARALLEL_TESTS     2 hosts x 2 ranks: the DdpMpi* and ZeroMpi* suites (DDP, ZeRO 1-3, FSDP)
#   comm COMM_TESTS         3 hosts x 1 rank: the Mpi* collective suites
#   actors ACTORS_MPI_TESTS 3 hosts x 1 rank: the actor suites across real connections, twice: as configured
#                           (small messages to other hosts by CAF) and with everything on the MPI lane
#   dqn EXE                 2 hosts x 2 ranks: dqn_cartpole reaches its target with a collector killed
#   cut_collective PROBE    3 hosts: host 2's cable pulled during all-reduces: ranks 0 and 1 fail within the
#                           group's timeout naming rank 2; nothing hangs
#   cut_actor PROBE         3 hosts: host 2's cable pulled while rank 0 calls an actor there: the actor
#                           system's heartbeat fails the call within seconds (not the 30 s request
#                           timeout), naming the actor and the lost connection; nothing hangs
#   slow_link COMM_TESTS    3 hosts, host 1's link shaped to 50 Mbit/s (tc tbf) dropping 1% of its incoming
#                           packets (nft): the Mpi* collective suites give the same results
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hosts.sh
source "$here/hosts.sh"

case_name=${1:?usage: run_case.sh CASE PROGRAM}
prog=${2:?usage: run_case.sh CASE PROGRAM}

why=$(mh_why_not)
if [[ -n "$why" ]]; then
  echo "SKIP multihost_$case_name: $why"
  exit 77
fi

# One case at a time on this machine (ctest may run others in parallel; the host names are fixed).
exec 9>/tmp/troupe-multihost.lock
flock 9

out=$(mktemp /tmp/troupe-mh-out.XXXXXX)
cleanup() {
  mh_down
  rm -f "$out" "$out.base"
}
trap cleanup EXIT

fail() {
  echo "---- output ----"
  cat "$out"
  echo "FAIL multihost_$case_name: $*"
  exit 1
}
need() {  # need REGEX WHAT: the output (without colour codes) must match REGEX
  # (not `sed | grep -q`: under pipefail, grep leaving at the first match makes sed's later writes fail with
  # SIGPIPE, and the pipeline with them: three ranks' PASSED lines made that fail a passing run)
  local clean
  clean=$(sed 's/\x1b\[[0-9;]*m//g' "$out")
  grep -Eq "$1" <<<"$clean" || fail "$2 (no line matches /$1/)"
}

# run_mh SECONDS HOSTS SLOTS MPIRUN-ARGS...: mpirun across the hosts, output to $out, bounded in time.
run_mh() {
  local limit=$1
  shift
  local rc=0
  timeout --kill-after=10 "$limit" bash -c 'source "$1"; shift; mh_mpirun "$@"' run_mh "$here/hosts.sh" "$@" >"$out" 2>&1 || rc=$?
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then fail "still running after $limit s (hang)"; fi
  return $rc
}

case "$case_name" in
  launch_demo)
    mh_up 3
    run_mh 120 3 1 -np 3 "$prog" || fail "mpirun failed"
    for r in 0 1 2; do need "rank $r/3 \\(mpi\\) all_reduce = 6 ok" "rank $r's all-reduce"; done
    for r in 0 1 2; do need "rank $r/3 backend mpi .*host $(mh_host $r)\$" "rank $r runs on host $(mh_host $r)"; done
    ! grep -q WRONG "$out" || fail "a rank got a wrong sum"
    ;;
  ddp_digits)
    mh_up 2
    args=(--epochs 6 --metrics none)
    run_mh 300 2 1 -np 2 "$prog" "${args[@]}" || fail "mpirun across 2 hosts failed"
    cp "$out" "$out.mh"
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 \
      mpirun --allow-run-as-root --oversubscribe -np 2 "$prog" "${args[@]}" >"$out.base" 2>&1 ||
      { cat "$out.base"; fail "mpirun on one host failed"; }
    # the epoch lines (loss, accuracy) and the held-out accuracy, without timings
    pick() { grep -E '^(epoch|held-out)' "$1" | sed -E 's/ *\(?[0-9.]+ ?(s|ms)\)?//g'; }
    [[ -n "$(pick "$out.mh")" ]] || { cp "$out.mh" "$out"; fail "no epoch lines"; }
    if ! diff <(pick "$out.base") <(pick "$out.mh") >/dev/null; then
      diff <(pick "$out.base") <(pick "$out.mh")
      cp "$out.mh" "$out"
      fail "2 hosts and 1 host trained to different numbers"
    fi
    echo "same epoch lines on 1 host and on 2 hosts:"
    pick "$out.mh"
    ;;
  zero)
    mh_up 2
    run_mh 600 2 2 -np 4 "$prog" --gtest_filter='DdpMpi*:ZeroMpi*' || fail "mpirun failed"
    need "\\[  PASSED  \\] [1-9][0-9]* tests" "the suites passed"
    ! grep -Eq "\\[  (FAILED|SKIPPED) \\]" "$out" || fail "a test failed or skipped"
    ;;
  comm | slow_link)
    mh_up 3
    if [[ $case_name == slow_link ]]; then
      # This kernel has no netem (no added delay); a rate limit and random loss stand in for a bad link.
      mh_exec 1 tc qdisc add dev eth0 root tbf rate 50mbit burst 64kb latency 50ms ||
        fail "tc could not shape the link"
      if command -v nft >/dev/null 2>&1; then
        mh_exec 1 nft add table inet troupe_loss &&
          mh_exec 1 nft add chain inet troupe_loss input '{ type filter hook input priority 0; }' &&
          mh_exec 1 nft add rule inet troupe_loss input numgen random mod 100 '<' 1 drop ||
          fail "nft could not drop packets"
        echo "host 1: 50 Mbit/s, 1% of incoming packets dropped"
      else
        echo "host 1: 50 Mbit/s (no nft here: no packet loss)"
      fi
    fi
    run_mh 600 3 1 -np 3 "$prog" --gtest_filter='Mpi*' || fail "mpirun failed"
    need "\\[  PASSED  \\] [1-9][0-9]* tests" "the suites passed"
    ! grep -Eq "\\[  (FAILED|SKIPPED) \\]" "$out" || fail "a test failed or skipped"
    ;;
  actors)
    mh_up 3
    # Twice: as configured (between hosts too every message of up to 1 MB, and every one with a tensor of
    # 1 MB or more, takes the lane), every suite; then with TROUPE_ACTOR_LANE_REMOTE_BYTES=1 MB (between
    # hosts only messages with a tensor that large take the lane, the rest CAF's connections; the MpiLane
    # suite, which counts Calls on the lane, is left out).
    # (MpiCuda.* skips without a GPU: left out, as a skip fails the case.)
    run_mh 600 3 1 -np 3 "$prog" --gtest_filter=-MpiCuda.* || fail "mpirun failed (as configured)"
    need "\\[  PASSED  \\] [1-9][0-9]* tests" "the suites passed (as configured)"
    ! grep -Eq "\\[  (FAILED|SKIPPED) \\]" "$out" || fail "a test failed or skipped (as configured)"
    TROUPE_ACTOR_LANE_REMOTE_BYTES=1048576 run_mh 600 3 1 -np 3 -x TROUPE_ACTOR_LANE_REMOTE_BYTES "$prog" \
      --gtest_filter=-MpiLane.*:MpiCuda.* || fail "mpirun failed (small messages between hosts by CAF)"
    need "\\[  PASSED  \\] [1-9][0-9]* tests" "the suites passed (small messages between hosts by CAF)"
    ! grep -Eq "\\[  (FAILED|SKIPPED) \\]" "$out" || fail "a test failed or skipped (small messages between hosts by CAF)"
    ;;
  dqn)
    mh_up 2
    run_mh 300 2 2 -np 4 "$prog" --frames 60000 --target 150 --kill-collector 5 --metrics none || fail "mpirun failed"
    need "solved|reached" "the target was reached"
    ;;
  cut_collective | cut_actor)
    mh_up 3
    mode=${case_name#cut_}
    # the group's timeout for all-reduces; for the actor call a long request timeout, so that what
    # fails it is the actor system's heartbeat (500 ms, connection timeout 5 s), not the deadline
    timeout_ms=4000
    [[ $mode == actor ]] && timeout_ms=30000
    (timeout --kill-after=10 120 bash -c 'source "$1"; shift; mh_mpirun "$@"' run_mh "$here/hosts.sh" 3 1 -np 3 \
      "$prog" --mode "$mode" --timeout-ms "$timeout_ms" >"$out" 2>&1) &
    job=$!
    # wait until the work runs across every link
    for _ in $(seq 1 600); do
      if [[ $mode == collective ]]; then
        [[ $(grep -c "round 50 ok" "$out") -ge 3 ]] && break
      else
        grep -q "rank 0 round 50 ok" "$out" && break
      fi
      kill -0 $job 2>/dev/null || fail "the job ended before the cut"
      sleep 0.1
    done
    grep -q "round 50 ok" "$out" || fail "the job never got going"
    cut_at=$(date +%s%N)
    mh_link 2 down
    echo "pulled host 2's cable"
    # the survivors must fail within the timeout (plus the diagnosis), the job must not hang
    deadline=$((timeout_ms + 8000))
    [[ $mode == actor ]] && deadline=9000
    while :; do
      waited=$((($(date +%s%N) - cut_at) / 1000000))
      if [[ $mode == collective ]]; then
        [[ $(grep -cE "rank [01] failed after" "$out") -ge 2 ]] && break
      else
        grep -q "rank 0 failed after" "$out" && break
      fi
      [[ $waited -gt $deadline ]] && { mh_link 2 up; fail "no failure within $deadline ms of the cut"; }
      sleep 0.1
    done
    echo "the survivors failed $waited ms after the cut"
    mh_link 2 up  # lets mpirun hear from host 2's daemon and end the job
    wait $job
    rc=$?
    [[ $rc -ne 124 && $rc -ne 137 ]] || fail "the job hung after the failure"
    [[ $rc -ne 0 ]] || fail "the job succeeded although a host was cut off"
    if [[ $mode == collective ]]; then
      for r in 0 1; do
        need "rank $r failed after [0-9]+ ms: .*did not complete within $timeout_ms ms.*not arrived: 2" \
          "rank $r names rank 2 as missing"
      done
    else
      need "rank 0 failed after [0-9]+ ms: .*probe\\.echo.*rank 2.*(unreachable|lost)" \
        "rank 0 names the actor, its rank and the lost connection"
    fi
    ;;
  *)
    echo "run_case.sh: unknown case '$case_name'" >&2
    exit 2
    ;;
esac
echo "---- output ----"
cat "$out"
echo "PASS multihost_$case_name"
