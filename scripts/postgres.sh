#!/usr/bin/env bash
# A throwaway PostgreSQL on 127.0.0.1 for `make bench` (FerretDB on
# PostgreSQL), installed from Debian's packages when missing.
#
#   scripts/postgres.sh start DIR PORT   # prints the URL FerretDB takes
#   scripts/postgres.sh stop DIR
#
# The cluster lives in DIR (created, trust authentication on loopback only)
# and is meant to be deleted after the run.
set -euo pipefail
cmd=${1:?start or stop}
dir=${2:?data directory}
port=${3:-54329}

pgbin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1; }
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
bin=$(pgbin)
if [ -z "$bin" ]; then
	echo "installing PostgreSQL from Debian's packages" >&2
	$sudo apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >&2
	bin=$(pgbin)
fi
# PostgreSQL refuses to run as root: root runs it as the postgres user.
as=()
if [ "$(id -u)" -eq 0 ]; then
	id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
	as=(runuser -u postgres --)
fi

case $cmd in
start)
	mkdir -p "$dir"
	[ ${#as[@]} -eq 0 ] || chown postgres "$dir"
	if [ ! -f "$dir/PG_VERSION" ]; then
		"${as[@]}" "$bin/initdb" -D "$dir" -U nubes -A trust --no-sync >/dev/null
	fi
	"${as[@]}" "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w \
		-o "-h 127.0.0.1 -p $port -k $dir -c max_connections=200" start >/dev/null
	"${as[@]}" "$bin/createdb" -h 127.0.0.1 -p "$port" -U nubes ferretdb 2>/dev/null || true
	echo "postgres://nubes@127.0.0.1:$port/ferretdb"
	;;
stop)
	[ -f "$dir/postmaster.pid" ] && "${as[@]}" "$bin/pg_ctl" -D "$dir" -m fast -w stop >/dev/null
	;;
*)
	echo "usage: $0 start|stop DIR [PORT]" >&2
	exit 2
	;;
esac
