#!/usr/bin/env bash
# Connection set-up cost, side by side: a full (or resumed) TLS 1.3
# handshake + WebSocket upgrade + one 16-byte echo + close, for edge, HAProxy
# and nginx (and a second edge binary, to compare two builds), measured two
# ways:
#
#   cpu        the proxy pinned to core 0 (GOMAXPROCS=1, nbthread 1, one
#              nginx worker), the generator and backend on core 1; user and
#              system CPU of the proxy's process tree (/proc/PID/stat) per
#              connection over a window, repeats rotated over the proxies
#   callgrind  user-space instructions per connection (valgrind
#              --tool=callgrind, instrumentation switched on for the window
#              only): independent of what else runs on the machine
#   syscalls   system calls per connection (or per echoed message), every
#              thread of the proxy's tree, in total and by name (perf stat
#              on the syscall tracepoints, attached for the window only:
#              unlike strace it does not slow the calls it counts, so the
#              batches of events are the unobserved ones)
#   profile    where the proxy's CPU goes, kernel and user space (perf
#              record over the window); the report, self time by symbol,
#              goes to bench/out/profile-PROXY-REPEAT-KIND.txt
#
# The third argument is full, resume, bare (a full handshake and close, no
# upgrade: the accept and the TLS work alone), or echo: the closed-loop echo of
# 100-byte messages over 200 connections (ops are messages, not
# connections), for the system calls and CPU per message.
#
#   bench/handshake.sh cpu 5 full gobwas        # 5 rotated repeats
#   bench/handshake.sh callgrind 1 resume gorilla
#   bench/handshake.sh syscalls 3 echo gobwas
#   bench/handshake.sh cpu 5 bare openssl      # the bare kind with openssl s_time as the client
#   EDGE_BIN=/tmp/edge-after EDGE_BEFORE=/tmp/edge-before bench/handshake.sh cpu 5 full gobwas
#
# Prints one line per proxy and repeat (proxy, repeat, connections,
# user-µs, system-µs or instructions per connection) and the medians of the
# per-repeat ratios of edge to the better anchor. Loopback only
# (127.0.22.1), bounded by the window; stops everything it started.
set -euo pipefail

mode=${1:-cpu}
repeats=${2:-3}
kind=${3:-full}
client=${4:-gobwas}
window=${WINDOW:-10}
# Under valgrind nginx runs as one process (no master).
[ "$mode" = callgrind ] && NGINX_MASTER=off
cd "$(dirname "$0")/.."
root=$(pwd)
out=$root/bench/out
dir=$(mktemp -d "${TMPDIR:-/tmp}/handshake.XXXXXX")
mkdir -p "$out/bin" "$dir/nginx-tmp"
ip=127.0.22.1

(cd bench && go build -o "$out/bin/loadgen" ./loadgen)
go build -o "$out/bin/edge-backend" ./cmd/edge-backend
edge=${EDGE_BIN:-$out/bin/edge}
[ -n "${EDGE_BIN:-}" ] || go build -o "$edge" ./cmd/edge

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$dir/key.pem" -out "$dir/cert.pem" \
	-days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost 2>/dev/null
cat "$dir/cert.pem" "$dir/key.pem" >"$dir/cert-and-key.pem"

# The same settings as bench/cmd/benchrun's templates: TLS 1.3 only,
# TLS_AES_128_GCM_SHA256, X25519, tickets on, X-Forwarded-For, opaque
# WebSockets, access logs off.
cat >"$dir/edge.yaml" <<EOF
admin: { address: $ip:19901 }
log: { level: warn, format: json, access_log: false }
limits: { max_connections: 0 }
listeners:
  - name: public
    address: $ip:18443
    tls:
      certificates: [ { cert_file: $dir/cert.pem, key_file: $dir/key.pem } ]
      min_version: "1.3"
      session_tickets: { enabled: true }
      ocsp: { enabled: false }
routes:
  - { default: true, pool: echo }
pools:
  - name: echo
    backends:
      - { address: $ip:19001, id: b1, weight: 1 }
    timeouts: { dial: 2s, handshake: 10s, idle: 1h, write: 30s }
    limits: { max_connections: 0, max_connections_per_backend: 0, max_connections_per_client_ip: 0, connection_rate_per_client_ip: 0, connection_burst_per_client_ip: 0 }
EOF
cat >"$dir/haproxy.cfg" <<EOF
global
    nbthread 1
    maxconn 9000
    ssl-default-bind-ciphersuites TLS_AES_128_GCM_SHA256
    ssl-default-bind-options ssl-min-ver TLSv1.3
    ssl-default-bind-curves X25519
defaults
    mode http
    maxconn 9000
    option forwardfor
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    timeout http-request 10s
    timeout tunnel 1h
frontend public
    bind $ip:18443 ssl crt $dir/cert-and-key.pem alpn http/1.1 backlog 4096
    default_backend echo
backend echo
    server b1 $ip:19001
EOF
cat >"$dir/nginx.conf" <<EOF
daemon off;
master_process ${NGINX_MASTER:-on};
worker_processes 1;
worker_rlimit_nofile 19000;
pid $dir/nginx.pid;
error_log $dir/nginx-error.log warn;
events { worker_connections 9000; }
http {
    access_log off;
    client_body_temp_path $dir/nginx-tmp;
    proxy_temp_path $dir/nginx-tmp;
    upstream echo { server $ip:19001; }
    map \$http_upgrade \$connection_upgrade { default upgrade; '' close; }
    server {
        listen $ip:18443 ssl backlog=4096;
        ssl_certificate $dir/cert.pem;
        ssl_certificate_key $dir/key.pem;
        ssl_protocols TLSv1.3;
        ssl_ecdh_curve X25519;
        ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256;
        ssl_session_tickets on;
        location / {
            proxy_pass http://echo;
            proxy_http_version 1.1;
            proxy_set_header Host \$host;
            proxy_set_header Upgrade \$http_upgrade;
            proxy_set_header Connection \$connection_upgrade;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_read_timeout 1h;
            proxy_send_timeout 1h;
        }
    }
}
EOF

# The calls counted by name in syscalls mode (the total counts them all).
syscalls="read write readv writev recvfrom sendto recvmsg sendmsg epoll_wait epoll_pwait epoll_pwait2 epoll_ctl futex nanosleep
	getpid accept4 close setsockopt getsockopt fcntl getsockname getpeername socket connect shutdown brk mmap munmap
	madvise tgkill rt_sigreturn sched_yield splice"
syscalls=$(echo $syscalls)

bpid=
ppid=
cleanup() {
	for p in $ppid $bpid; do
		kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true
	done
	ppid= bpid=
}
trap 'cleanup; rm -rf "$dir"' EXIT INT TERM

proxies=(edge haproxy nginx)
[ -n "${EDGE_BEFORE:-}" ] && proxies=(edge-before edge haproxy nginx)
# MLKEM=1 adds edge-mlkem: edge again, with clients that offer only the
# hybrid X25519MLKEM768 (what Chromium and Firefox prefer), which OpenSSL
# 3.0 cannot negotiate: its own row, against edge with X25519.
[ -n "${MLKEM:-}" ] && proxies+=(edge-mlkem)
# EDGE_ALT=binary adds edge-alt, a third build; PROXIES="a b ..." picks
# the proxies (and their rotation) outright.
[ -n "${EDGE_ALT:-}" ] && proxies+=(edge-alt)
[ -n "${PROXIES:-}" ] && read -r -a proxies <<<"$PROXIES"

argv() {
	case $1 in
	edge | edge-mlkem) echo "$edge -config $dir/edge.yaml" ;;
	edge-before) echo "$EDGE_BEFORE -config $dir/edge.yaml" ;;
	edge-alt) echo "$EDGE_ALT -config $dir/edge.yaml" ;;
	haproxy) echo "haproxy -db -f $dir/haproxy.cfg" ;;
	nginx) echo "nginx -c $dir/nginx.conf -p $dir" ;;
	esac
}

tree_times() { # utime stime in ticks of a process and its children
	local u=0 s=0 p
	for p in $1 $(pgrep -P "$1" || true); do
		read -r a b < <(awk '{sub(/.*\) /,""); print $12, $13}' "/proc/$p/stat" 2>/dev/null || echo "0 0")
		u=$((u + a)) s=$((s + b))
	done
	echo "$u $s"
}

# one_s_time measures the bare kind with OpenSSL's own client instead of
# loadgen's crypto/tls: WORKERS (default 8) `openssl s_time -new` loops on
# the load core for the window, TLS 1.3 with TLS_AES_128_GCM_SHA256 and
# OpenSSL 3.0's default key share, X25519; cpu mode only.
one_s_time() { # proxy repeat
	local name=$1 rep=$2 t0 t1 i ops=0 n pids=()
	t0=$(tree_times "$ppid")
	for i in $(seq "${WORKERS:-8}"); do
		taskset -c 1 openssl s_time -connect $ip:18443 -new -tls1_3 -ciphersuites TLS_AES_128_GCM_SHA256 \
			-time "$window" >"$dir/s_time-$i.txt" 2>&1 &
		pids+=($!)
	done
	wait "${pids[@]}" 2>/dev/null || true
	t1=$(tree_times "$ppid")
	for i in $(seq "${WORKERS:-8}"); do
		n=$(sed -n 's/^\([0-9]*\) connections in [0-9.]* real seconds.*/\1/p' "$dir/s_time-$i.txt" | head -1)
		ops=$((ops + ${n:-0}))
	done
	set -- $t0 $t1
	local tck
	tck=$(getconf CLK_TCK)
	awk -v n="$name" -v r="$rep" -v o="$ops" -v u=$(($3 - $1)) -v s=$(($4 - $2)) -v t="$tck" \
		'BEGIN { d = o > 0 ? o : 1; printf "%s %d %d 0 us %.1f %.1f\n", n, r, o, u * 1e6 / t / d, s * 1e6 / t / d }'
}

one() { # proxy repeat
	local name=$1 rep=$2 cmd r=""
	cmd=$(argv "$name")
	[ "$kind" = resume ] && r=-resume
	setsid taskset -c 1 "$out/bin/edge-backend" -listen $ip:19001 -id b1 >/dev/null 2>&1 &
	bpid=$!
	if [ "$mode" = callgrind ]; then
		GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off setsid valgrind --tool=callgrind --instr-atstart=no \
			--callgrind-out-file="$dir/$name-$rep.cg" $cmd >"$dir/$name.log" 2>&1 &
	else
		GOMAXPROCS=1 setsid taskset -c 0 $cmd >"$dir/$name.log" 2>&1 &
	fi
	ppid=$!
	for _ in $(seq 300); do ss -ltn | grep -q "$ip:18443 " && break; sleep 0.1; done
	sleep 1
	if [ "$client" = openssl ]; then
		one_s_time "$name" "$rep"
		cleanup
		sleep 0.5
		return
	fi
	local load="-mode connect -workers ${WORKERS:-16} $r"
	[ "$kind" = echo ] && load="-mode echo -conns ${CONNS:-200} -size 100"
	[ "$kind" = bare ] && load="$load -bare"
	[ "$name" = edge-mlkem ] && load="$load -curve X25519MLKEM768"
	coproc LG { taskset -c 1 "$out/bin/loadgen" $load -client "$client" -target $ip:18443 \
		-src-base 127.0.22.2 -src-count 16 -timeout 60s -max-life 10m 2>>"$dir/loadgen.log"; }
	# The coprocess's variables vanish when it exits: keep its pipes.
	local lgout lgin line lgpid=$LG_PID
	exec {lgout}<&"${LG[0]}" {lgin}>&"${LG[1]}"
	read -r line <&"$lgout"
	local worker=$ppid # the tree sum covers nginx's worker
	local t0 t1
	local spid= tpid=
	case $mode in
	callgrind) callgrind_control -i on "$ppid" >/dev/null ;;
	profile)
		perf record -q -F 4999 -g -o "$out/profile-$name-$rep-$kind.data" -p "$(pgrep -d, -g "$ppid")" 2>/dev/null &
		spid=$!
		sleep 0.5
		;;
	syscalls)
		# Every process of the tree (nginx's worker too), every thread.
		local evs=raw_syscalls:sys_enter sc
		for sc in $syscalls; do evs=$evs,syscalls:sys_enter_$sc; done
		perf stat -x, -e "$evs" -p "$(pgrep -d, -g "$ppid")" -o "$dir/$name-$rep.perf" &
		# TRACE=1: also the time in each call (perf trace -s), which slows
		# the calls it times: the counts are perf stat's.
		if [ -n "${TRACE:-}" ]; then
			perf trace -s -p "$(pgrep -d, -g "$ppid")" -o "$out/trace-$name-$rep-$kind.txt" &
			tpid=$!
		fi
		spid=$!
		sleep 0.5
		;;
	*) t0=$(tree_times "$worker") ;;
	esac
	echo start >&"$lgin"
	sleep "$window"
	echo stop >&"$lgin"
	case $mode in
	callgrind) callgrind_control -i off "$ppid" >/dev/null ;;
	syscalls | profile)
		kill -INT "$spid" && wait "$spid" 2>/dev/null || true
		[ -z "${tpid:-}" ] || { kill -INT "$tpid" && wait "$tpid" 2>/dev/null || true; }
		;;
	*) t1=$(tree_times "$worker") ;;
	esac
	read -r line <&"$lgout"
	local ops res
	ops=$(echo "$line" | sed -n 's/.*"ops":\([0-9]*\).*/\1/p')
	[ -n "$ops" ] || ops=$(echo "$line" | sed -n 's/.*"messages":\([0-9]*\).*/\1/p')
	res=$(echo "$line" | sed -n 's/.*"resumed":\([0-9]*\).*/\1/p')
	if [ "$mode" = callgrind ]; then
		callgrind_control -d "$ppid" >/dev/null
		sleep 1
		local ir
		ir=$(callgrind_annotate --auto=no "$dir/$name-$rep.cg".1 2>/dev/null | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}')
		echo "$name $rep ${ops:-0} ${res:-0} ir $((ir / ${ops:-1}))"
	elif [ "$mode" = profile ]; then
		local rep_file=$out/profile-$name-$rep-$kind.txt
		perf report -i "$out/profile-$name-$rep-$kind.data" --no-children --sort dso,sym --stdio -g none --percent-limit 0.3 2>/dev/null >"$rep_file" || true
		echo "$name $rep ${ops:-0} ${res:-0} profile $rep_file"
	elif [ "$mode" = syscalls ]; then
		# The calls over the window's operations: the total, then by name.
		# perf counts from its attach to its detach, half a second more
		# than the window on either side, while the generator is stopped.
		awk -F, -v name="$name" -v rep="$rep" -v ops="${ops:-0}" -v res="${res:-0}" '
			$3 ~ /sys_enter/ { n = $1 + 0; sc = $3; sub(/.*sys_enter_?/, "", sc); if (sc == "") tot = n; else by[sc] = n }
			END { if (ops == 0) ops = 1
				printf "%s %d %d %d calls %.2f", name, rep, ops, res, tot / ops
				for (k in by) if (by[k] / ops >= 0.02) printf " %s=%.2f", k, by[k] / ops
				printf "\n" }' "$dir/$name-$rep.perf"
	else
		set -- $t0 $t1
		local tck
		tck=$(getconf CLK_TCK)
		# One decimal: a message costs a few µs.
		awk -v n="$name" -v r="$rep" -v o="${ops:-0}" -v res="${res:-0}" -v u=$(($3 - $1)) -v s=$(($4 - $2)) -v t="$tck" \
			'BEGIN { d = o > 0 ? o : 1; printf "%s %d %d %d us %.1f %.1f\n", n, r, o, res, u * 1e6 / t / d, s * 1e6 / t / d }'
	fi
	exec {lgin}>&- {lgout}<&-
	wait "$lgpid" 2>/dev/null || true
	cleanup
	sleep 0.5
}

results=$dir/results.txt
for rep in $(seq "$repeats"); do
	# Rotate the order every repeat, so that no proxy always runs first.
	n=${#proxies[@]}
	for i in $(seq 0 $((n - 1))); do
		one "${proxies[$(((i + rep) % n))]}" "$rep" | tee -a "$results"
	done
done

[ "$mode" = syscalls ] || [ "$mode" = profile ] && exit 0

# Medians of per-repeat ratios of edge to the better of HAProxy and nginx:
# of the total, and of user space alone (cpu mode); of instructions
# (callgrind mode).
awk -v mode="$mode" '
function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
{ if (mode == "cpu") { u[$1, $2] = $6; s[$1, $2] = $7 } else { u[$1, $2] = $6; s[$1, $2] = 0 } reps[$2] = 1 }
END {
	split("edge edge-before", es, " ")
	for (k = 1; k <= 2; k++) {
		e = es[k]; n = 0
		for (r in reps) if ((e, r) in u) {
			# The better anchor is the one with the lower total; its user space
			# is the user-space reference.
			bt = 1e18; bu = 1e18
			if (("haproxy", r) in u) { bt = u["haproxy", r] + s["haproxy", r]; bu = u["haproxy", r] }
			if (("nginx", r) in u && u["nginx", r] + s["nginx", r] < bt) { bt = u["nginx", r] + s["nginx", r]; bu = u["nginx", r] }
			n++; tot[n] = (u[e, r] + s[e, r]) / bt; usr[n] = u[e, r] / bu
			if (n == 1 || tot[n] < tmin) tmin = tot[n]; if (n == 1 || tot[n] > tmax) tmax = tot[n]
			if (n == 1 || usr[n] < umin) umin = usr[n]; if (n == 1 || usr[n] > umax) umax = usr[n]
		}
		if (n == 0) continue
		if (e == "edge") for (r in reps) if (("edge-mlkem", r) in u) { m++; hy[m] = (u["edge-mlkem", r] + s["edge-mlkem", r]) / (u[e, r] + s[e, r]) }
		printf "%s / better anchor, median of %d per-repeat ratios: total %.2fx (%.2f-%.2f)", e, n, med(tot, n), tmin, tmax
		if (mode == "cpu") printf ", user space %.2fx (%.2f-%.2f)", med(usr, n), umin, umax
		printf "\n"
		if (m > 0) { printf "edge-mlkem / edge, median of %d per-repeat ratios: total %.2fx\n", m, med(hy, m); m = 0 }
	}
}' "$results"
