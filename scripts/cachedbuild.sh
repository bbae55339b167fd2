# cachedbuild.sh is sourced by consul.sh and prometheus.sh: it builds a Go
# tool from a pinned module under deploy/, once per machine, into
# ${XDG_CACHE_HOME:-$HOME/.cache}/edge/NAME-VERSION/NAME, and prints the
# binary's path on stdout (progress goes to stderr).
#
# Usage (after setting root): cached_build NAME VERSION MODDIR PKG [go build flags...]

cached_build() {
	name=$1 version=$2 moddir=$3 pkg=$4
	shift 4
	cache=${XDG_CACHE_HOME:-$HOME/.cache}/edge/$name-$version
	bin=$cache/$name
	if [ -x "$bin" ]; then
		echo "$bin"
		return 0
	fi
	mkdir -p "$cache"
	tmp=$(mktemp "$cache/$name.XXXXXX")
	echo "$name: building $version into $bin (a cold build takes minutes)" >&2
	# A heartbeat on stderr (never stdout: callers read the path from it),
	# so nobody waits minutes in silence.
	(
		start=$(date +%s)
		while sleep 30; do
			echo "$name: still building ($(( $(date +%s) - start )) s)" >&2
		done
	) >&2 &
	beat=$!
	trap 'kill "$beat" 2>/dev/null; rm -f "$tmp"' EXIT INT TERM
	# The pinned go.mod and go.sum are complete, so the build never
	# rewrites them; GOWORK=off keeps a go.work out of it.
	(
		cd "$root/$moddir"
		GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 \
			go build -trimpath "$@" -o "$tmp" "$pkg"
	)
	kill "$beat" 2>/dev/null || true
	chmod 0755 "$tmp"
	# rename is atomic: a concurrent run sees either no binary or a whole one.
	mv -f "$tmp" "$bin"
	trap - EXIT INT TERM
	echo "$bin"
}
