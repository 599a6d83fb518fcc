#!/usr/bin/env bash
# Test hosts on one machine: each host is a network namespace (its own interfaces, addresses and, through
# `ip netns exec`, its own /etc/hosts) entered with a UTS namespace of its own (its own hostname). The
# hosts are linked by veth pairs to a bridge that lives in a namespace of its own, so the root namespace
# and every outside address stay untouched: only the hosts' addresses (198.18.0.0/24, RFC 2544's range
# for test networks) and loopback are ever used. Sourced by run_case.sh; also usable by hand:
#   bash tests/multihost/hosts.sh up 3     # makes troupe-mh0..2 and the switch troupe-mhsw
#   bash tests/multihost/hosts.sh run 3 2 -- mpirun-args...   # (see mh_mpirun)
#   bash tests/multihost/hosts.sh down
# mpirun starts on host 0; Open MPI's rsh launcher reaches the other hosts through ns_agent.sh (this
# folder), which enters the host's namespaces instead of ssh. Open MPI's TCP traffic (its out-of-band
# channel and the tcp BTL) is bound to the test link `eth0`; the actor systems resolve the hostnames
# through each host's /etc/hosts.

MH_PREFIX=${MH_PREFIX:-troupe-mh}
MH_SWITCH="${MH_PREFIX}sw"
MH_NET=198.18.0
MH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

mh_host() { echo "${MH_PREFIX}$1"; }

# Why multi-host tests cannot run here, or nothing.
mh_why_not() {
  [[ $(id -u) -eq 0 ]] || { echo "not root (network namespaces need CAP_SYS_ADMIN)"; return; }
  command -v ip >/dev/null 2>&1 || { echo "no 'ip' (iproute2)"; return; }
  command -v unshare >/dev/null 2>&1 || { echo "no 'unshare' (util-linux)"; return; }
  command -v mpirun >/dev/null 2>&1 || { echo "no mpirun"; return; }
  local probe="${MH_PREFIX}probe$$"
  if ! ip netns add "$probe" 2>/dev/null; then echo "cannot create a network namespace ('ip netns add' failed)"; return; fi
  if ! ip netns exec "$probe" unshare --uts true 2>/dev/null; then
    ip netns del "$probe"; echo "cannot create a UTS namespace"; return
  fi
  if ! ip link add mhprobe0 netns "$probe" type veth peer name mhprobe1 netns "$probe" 2>/dev/null; then
    ip netns del "$probe"; echo "cannot create veth pairs"; return
  fi
  ip netns del "$probe"
}

mh_down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${MH_PREFIX}" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
}

# mh_up N: hosts 0..N-1 on one switch.
mh_up() {
  local n=$1 i h
  mh_down
  ip netns add "$MH_SWITCH"
  ip netns exec "$MH_SWITCH" ip link add br0 type bridge
  ip netns exec "$MH_SWITCH" ip link set br0 up
  local hosts_file="127.0.0.1 localhost"$'\n'
  for ((i = 0; i < n; i++)); do hosts_file+="$MH_NET.$((i + 1)) $(mh_host $i)"$'\n'; done
  for ((i = 0; i < n; i++)); do
    h=$(mh_host $i)
    ip netns add "$h"
    ip link add eth0 netns "$h" type veth peer name "port$i" netns "$MH_SWITCH"
    ip netns exec "$MH_SWITCH" ip link set "port$i" master br0 up
    ip netns exec "$h" ip addr add "$MH_NET.$((i + 1))/24" dev eth0
    ip netns exec "$h" ip link set eth0 up
    ip netns exec "$h" ip link set lo up
    mkdir -p "/etc/netns/$h"
    printf '%s' "$hosts_file" >"/etc/netns/$h/hosts"
  done
}

# mh_link HOST up|down: plugs or pulls host HOST's cable (its port on the switch).
mh_link() { ip netns exec "$MH_SWITCH" ip link set "port$1" "$2"; }

# mh_exec I CMD...: runs CMD as host I (its network, hosts file and hostname).
mh_exec() {
  local h
  h=$(mh_host "$1")
  shift
  ip netns exec "$h" unshare --uts -- sh -c 'hostname "$1"; shift; exec "$@"' sh "$h" "$@"
}

# mh_mpirun HOSTS SLOTS MPIRUN-ARGS...: mpirun on host 0 over hosts 0..HOSTS-1 with SLOTS slots each.
# --bind-to none: every test host sees all of this machine's cores, and Open MPI binds each host's first
# rank to core 0, so with its default binding the ranks of all hosts shared one core (a 4 KB MPI
# ping-pong between two hosts took 8 ms a round trip, 0.028 ms with mpi_yield_when_idle=1, 0.017 ms
# unbound; 2026-11-28).
mh_mpirun() {
  local hosts=$1 slots=$2 i
  shift 2
  local hostfile
  hostfile=$(mktemp /tmp/troupe-mh-hostfile.XXXXXX)
  for ((i = 0; i < hosts; i++)); do echo "$(mh_host $i) slots=$slots"; done >"$hostfile"
  local rc=0
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mh_exec 0 mpirun --allow-run-as-root --hostfile "$hostfile" \
    --mca plm_rsh_agent "$MH_DIR/ns_agent.sh" \
    --mca oob_tcp_if_include eth0 --mca btl self,vader,tcp --mca btl_tcp_if_include eth0 --bind-to none \
    -x OMPI_MCA_btl_vader_single_copy_mechanism=none \
    "$@" || rc=$?
  rm -f "$hostfile"
  return $rc
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  case "${1:-}" in
    up) mh_up "${2:-3}" ;;
    down) mh_down ;;
    run) shift; h=$1 s=$2; shift 3; mh_mpirun "$h" "$s" "$@" ;;
    why) mh_why_not ;;
    *) echo "usage: hosts.sh up N | down | run HOSTS SLOTS -- MPIRUN-ARGS | why" >&2; exit 2 ;;
  esac
fi
