#!/usr/bin/env bash
# Sets everything up (deploy/setup.sh) and starts the node in the foreground,
# serving the example worker `hello` on http://127.0.0.1:8080 (Host: hello.localhost).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$top/deploy/setup.sh"
echo "==> starting edgenode --dev (data in $top/data; Ctrl-C stops it)"
echo "    try: curl -H 'Host: hello.localhost' http://127.0.0.1:8080/"
cd "$top"
exec "$top/build/bin/edgenode" --dev --data "$top/data" "$@"
