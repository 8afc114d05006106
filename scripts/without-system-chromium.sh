#!/bin/sh
# Runs "$@" (e.g. `npm test`) as on a machine without Debian's chromium: in a private mount namespace
# (root needed) where /usr/bin lacks chromium and /tmp is empty, so the packaged Chromium is unpacked
# afresh. Run it from a checkout outside /tmp:  scripts/without-system-chromium.sh npm test
set -e
exec unshare -m /bin/sh -c '
set -e
mount --make-rprivate /
orig=$(mktemp -d /run/usrbin-orig.XXXXXX); shadow=$(mktemp -d /run/usrbin-shadow.XXXXXX)
mount --bind /usr/bin "$orig"
for f in "$orig"/*; do
  n=${f##*/}
  case "$n" in chromium|chromium-browser) continue ;; esac
  t=$(readlink -f "/usr/bin/$n")
  case "$t" in /usr/bin/*) t="$orig/${t#/usr/bin/}" ;; esac
  ln -s "$t" "$shadow/$n"
done
mount --bind "$shadow" /usr/bin
mount -t tmpfs tmpfs /tmp
echo "system chromium: $(ls /usr/bin/chromium 2>&1)"; echo "/tmp entries: $(ls -A /tmp | wc -l)"
exec "$@"' sh "$@"
