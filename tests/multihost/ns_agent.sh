#!/bin/sh
# Open MPI's rsh agent for the test hosts of hosts.sh: called as `ns_agent.sh [ssh options] HOST COMMAND...`
# in place of ssh, it runs COMMAND (joined and read by a shell, as ssh does) as HOST: in HOST's network
# namespace (with its /etc/hosts) and a UTS namespace whose hostname is HOST.
while [ $# -gt 0 ]; do
  case "$1" in
    -*) shift ;;
    *) break ;;
  esac
done
host="$1"
shift
if ! ip netns list | awk '{print $1}' | grep -qx "$host"; then
  echo "ns_agent.sh: no test host '$host' (make them with tests/multihost/hosts.sh up N)" >&2
  exit 255
fi
exec ip netns exec "$host" unshare --uts -- sh -c 'hostname "$1"; shift; eval "$*"' sh "$host" "$@"
