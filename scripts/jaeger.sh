#!/usr/bin/env bash
# Prints the path of a Jaeger v2 binary, building it first if needed.
# `go install` of Jaeger is refused (its go.mod has replace directives), so
# the module is downloaded through the Go proxy, copied somewhere writable and
# built in place, once: the binary is cached outside the repository
# (${GPUVIZ_CACHE:-~/.cache/gpuviz}). The first build takes about 6 minutes on
# 2 cores; later calls return at once.
set -euo pipefail
version=v1.76.0 # Jaeger v2.13
cache=${GPUVIZ_CACHE:-$HOME/.cache/gpuviz}
bin=$cache/jaeger-$version/jaeger
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d "$cache/jaeger-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
dir=$(go mod download -json "github.com/jaegertracing/jaeger@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$dir" ] || { echo "jaeger.sh: could not download github.com/jaegertracing/jaeger@$version" >&2; exit 1; }
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
echo "jaeger.sh: building Jaeger $version (first time only, a few minutes)..." >&2
(cd "$work/src" && CGO_ENABLED=0 go build -o "$work/jaeger" ./cmd/jaeger)
mkdir -p "$(dirname "$bin")"
mv "$work/jaeger" "$bin"
echo "$bin"
