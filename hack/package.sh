#!/usr/bin/env bash
# Build pinfold's Debian package: the static binary (its version from the
# git checkout), man pages generated from the commands' --help, the systemd
# units (Type=notify, with watchdogs) and a default config.
#
#   hack/package.sh [OUTDIR]     writes OUTDIR/pinfold_VERSION_ARCH.deb (default dist/)
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/lib.sh
ensure_go
out=${1:-dist}
mkdir -p "$out"
arch=$(go env GOARCH)
# Debian versions start with a digit: 0.0~gitDATE.COMMIT until a release tag.
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
date=$(git log -1 --format=%cd --date=format:%Y%m%d 2>/dev/null || date +%Y%m%d)
version=$(git describe --tags --exact-match 2>/dev/null | sed 's/^v//' || true)
[ -n "$version" ] || version="0.0~git$date.$commit"
root=$(mktemp -d); trap 'rm -rf "$root"' EXIT
chmod 0755 "$root"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version $(vcs_ldflags)" -o "$root/usr/bin/pinfold" ./cmd/pinfold
mkdir -p "$root/usr/share/man/man1" "$root/lib/systemd/system" "$root/etc/default" "$root/usr/share/doc/pinfold" "$root/DEBIAN" \
  "$root/usr/lib/sysusers.d" "$root/usr/share/lintian/overrides"
"$root/usr/bin/pinfold" man "$root/usr/share/man/man1"
gzip -9n "$root"/usr/share/man/man1/*.1
install -m 0644 hack/package/pinfold-planner.service hack/package/pinfold-agent.service "$root/lib/systemd/system/"
install -m 0644 hack/package/pinfold.default "$root/etc/default/pinfold"
# The planner's user (User=pinfold), made by systemd-sysusers in postinst.
install -m 0644 hack/package/pinfold.sysusers "$root/usr/lib/sysusers.d/pinfold.conf"
# Why lintian's statically-linked-binary does not apply (documented there).
install -m 0644 hack/package/pinfold.lintian-overrides "$root/usr/share/lintian/overrides/pinfold"
cat > "$root/usr/share/doc/pinfold/copyright" <<COPY
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: pinfold
Source: https://github.com/pinfold/pinfold

Files: *
Copyright: 2026 the pinfold authors
License: Apache-2.0
 On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0.
COPY
printf 'pinfold (%s) unstable; urgency=medium\n\n  * Built from commit %s.\n\n -- pinfold <pinfold@example.com>  %s\n' \
  "$version" "$commit" "$(date -R)" | gzip -9n > "$root/usr/share/doc/pinfold/changelog.gz"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CTRL
Package: pinfold
Version: $version
Architecture: $arch
Maintainer: pinfold <pinfold@example.com>
Installed-Size: $size
Depends: systemd
Recommends: docker.io
Section: admin
Priority: optional
Homepage: https://github.com/pinfold/pinfold
Description: node-level cgroup v2 resource enforcer with a central planner
 pinfold places container instances on hosts and CPUs (whole CPUs plus at
 most one CPU shared in pieces, NUMA-local) and enforces the plan on every
 host through cgroup v2 and the Docker Engine API. The package holds the one
 binary (planner, node agent and command line), man pages, and systemd
 units pinfold-planner.service and pinfold-agent.service.
CTRL
echo /etc/default/pinfold > "$root/DEBIAN/conffiles"
cat > "$root/DEBIAN/postinst" <<'POST'
#!/bin/sh
set -e
# The planner's user before its unit may start (pinfold-planner.service).
if [ "$1" = configure ] && command -v systemd-sysusers >/dev/null 2>&1; then
  systemd-sysusers pinfold.conf
fi
if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
POST
chmod 0755 "$root/DEBIAN/postinst"
deb="$out/pinfold_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
