#!/usr/bin/env bash
# Self-check of tests/netns/netbed.sh: 3 hosts, h1 and h2 also on an isolated net.
# Exit 0: every check passed; 1: some failed; 77: skipped (not root, no ip netns, no sshd).
# shellcheck disable=SC2016  # remote commands are single-quoted on purpose
set -uo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export HVD_NETBED_PREFIX=${HVD_NETBED_PREFIX:-hvdt$$}
netns_require test_netbed
P=$HVD_NETBED_PREFIX
D=$HVD_NETBED_DIR
cfg=$D/ssh_config

fails=0
pass() { echo "ok   $*"; }
fail() {
  echo "FAIL $*"
  fails=$((fails + 1))
}

secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
downed=0
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
  local rc=$?
  if ((!downed)); then
    echo "cleanup: netbed down"
    timeout 60 bash "$netbed" down || echo "cleanup: down failed"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM HUP

links_before=$(ip -o link show | wc -l)

t0=$(date +%s.%N)
if ! timeout 120 bash "$netbed" up 3 --isolated 2; then
  fail "netbed up 3 --isolated 2"
  exit 1
fi
t_up=$(date +%s.%N)
pass "up 3 --isolated 2 ($(secs "$t0" "$t_up")s)"

nbexec() { timeout 20 bash "$netbed" exec "$@" </dev/null; }

# 1. every host reaches every host's sshd, by name and by address, and lands on the right host
for a in 1 2 3; do
  for b in 1 2 3; do
    for target in "h$b" "10.77.0.$b"; do
      out=$(nbexec "h$a" ssh -F "$cfg" "$target" 'echo "$HVD_NETBED_HOST"; ip -4 -o addr show dev eth0' 2>&1)
      if [[ "$(sed -n 1p <<<"$out")" == "h$b" ]] && grep -q "inet 10.77.0.$b/24" <<<"$out"; then
        pass "h$a -> $target is h$b"
      else
        fail "h$a -> $target: got: $(tr '\n' '|' <<<"$out")"
      fi
    done
  done
done

# 2. the isolated net: h1 <-> h2 over 10.78.0.0/24 (ping and ssh), h3 not at all
for pair in "1 2" "2 1"; do
  read -r a b <<<"$pair"
  if nbexec "h$a" ping -c 1 -W 2 "10.78.0.$b" >/dev/null 2>&1; then
    pass "h$a pings 10.78.0.$b"
  else
    fail "h$a cannot ping 10.78.0.$b"
  fi
  out=$(nbexec "h$a" ssh -F "$cfg" "h$b-iso" 'echo "$HVD_NETBED_HOST"' 2>&1)
  if [[ "$out" == "h$b" ]]; then pass "h$a -> h$b-iso (10.78.0.$b) by ssh"; else fail "h$a -> h$b-iso: $out"; fi
done
if nbexec h3 ip -o link show eth1 >/dev/null 2>&1; then fail "h3 has an eth1"; else pass "h3 has no eth1"; fi
tcp_probe() { # host addr port: 0 when a TCP connect succeeds within 4 s
  nbexec "$1" timeout 4 bash -c "exec 3<>/dev/tcp/$2/$3" >/dev/null 2>&1
}
for b in 1 2; do
  if nbexec h3 ping -c 1 -W 2 "10.78.0.$b" >/dev/null 2>&1; then
    fail "h3 pings 10.78.0.$b"
  else pass "h3 cannot ping 10.78.0.$b"; fi
  if tcp_probe h3 "10.78.0.$b" 22; then fail "h3 connects to 10.78.0.$b:22"; else pass "h3 cannot connect to 10.78.0.$b:22"; fi
done
# even with an on-link route through its only interface h3 must not get there (arp_ignore)
if nbexec h3 ip route add 10.78.0.0/24 dev eth0; then
  if tcp_probe h3 10.78.0.1 22; then
    fail "h3 reaches 10.78.0.1:22 through 10.77.0.0/24 with an on-link route"
  else
    pass "h3 cannot reach 10.78.0.1 even with an on-link route"
  fi
  nbexec h3 ip route del 10.78.0.0/24 dev eth0 || fail "h3: cannot delete the test route"
else
  fail "h3: cannot add a test route"
fi
# the positive control of the probe itself
if tcp_probe h1 10.78.0.2 22; then pass "h1 connects to 10.78.0.2:22"; else fail "h1 cannot connect to 10.78.0.2:22"; fi

# 3. exec, status and the ssh wrapper
if [[ -x "$D/bin/ssh" ]] && [[ "$(nbexec h2 env PATH="$D/bin:$PATH" ssh h3 'echo $HVD_NETBED_HOST' 2>&1)" == h3 ]]; then
  pass "PATH=\$NETBED_DIR/bin ssh h3 works"
else
  fail "the ssh wrapper in $D/bin"
fi
st=$(timeout 20 bash "$netbed" status 2>&1)
if [[ $(grep -c "sshd pid" <<<"$st") -eq 3 ]]; then pass "status shows 3 sshds"; else fail "status: $st"; fi

# host names resolve inside every host (ip netns exec mounts /etc/netns/<ns>/hosts)
if [[ "$(nbexec h3 getent hosts h1)" == "10.77.0.1"*h1 && "$(nbexec h1 getent hosts h2-iso)" == "10.78.0.2"*h2-iso ]]; then
  pass "h1, h2-iso resolve inside the hosts"
else
  fail "names do not resolve inside the hosts: $(nbexec h3 getent hosts h1)"
fi

# 4. down leaves nothing behind, and is idempotent
t_d0=$(date +%s.%N)
if timeout 60 bash "$netbed" down; then pass "down"; else fail "down returned non-zero"; fi
t_d1=$(date +%s.%N)
downed=1
if timeout 60 bash "$netbed" down; then pass "second down (idempotent)"; else fail "second down returned non-zero"; fi
left=$(ip netns list | awk '{print $1}' | grep -E "^${P}(br|h[0-9]+)\$" || true)
if [[ -z "$left" ]]; then pass "no namespace left"; else fail "namespaces left: $left"; fi
links_after=$(ip -o link show | wc -l)
if ((links_after == links_before)) && ! ip -o link show | grep -qE "(^[0-9]+: ($P|h[0-9]+[ab]|br[01])[@:])"; then
  pass "no link left in the root namespace ($links_after links, as before)"
else
  fail "root namespace links changed: $links_before -> $links_after"
fi
if pgrep -f "$D/" >/dev/null; then fail "processes left: $(pgrep -af "$D/")"; else pass "no process uses $D"; fi
if [[ -e "$D" ]]; then fail "state dir $D left"; else pass "state dir removed"; fi
if compgen -G "/etc/netns/${P}h*" >/dev/null; then fail "/etc/netns/${P}h* left"; else pass "no /etc/netns entry left"; fi

# 5. --hostnames: each host (its sshd's sessions, and exec) has a host name of its own;
# --rate: each host's link is a token bucket of that rate
downed=0
if timeout 120 bash "$netbed" up 2 --hostnames --rate 1gbit >/dev/null 2>&1; then
  got="$(nbexec h1 hostname) $(nbexec h1 env PATH="$D/bin:$PATH" ssh h2 hostname 2>&1)"
  if [[ $got == "h1 h2" && "$(hostname)" != h1 ]]; then
    pass "--hostnames: h1 and h2 by name (this machine: $(hostname))"
  else
    fail "--hostnames: host names '$got'"
  fi
  q="$(nbexec h1 tc qdisc show dev eth0) / $(nbexec h2 tc qdisc show dev eth0)"
  if [[ $q == *"tbf "*"rate 1Gbit"*/*"tbf "*"rate 1Gbit"* ]]; then
    pass "--rate 1gbit: a 1 Gbit/s token bucket on h1's and h2's eth0"
  else
    fail "--rate 1gbit: qdiscs '$q'"
  fi
else
  fail "netbed up 2 --hostnames --rate 1gbit"
fi
timeout 60 bash "$netbed" down >/dev/null 2>&1 || fail "down after --hostnames"
downed=1

echo "timings: up $(secs "$t0" "$t_up")s, checks $(secs "$t_up" "$t_d0")s, down $(secs "$t_d0" "$t_d1")s"
if ((fails)); then
  echo "test_netbed: $fails check(s) FAILED"
  exit 1
fi
echo "test_netbed: all checks passed"
exit 0
