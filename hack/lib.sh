# Shared helpers for hack/*.sh; source it, don't run it.

# ensure_go puts a Go toolchain on PATH: the machine's own (/usr/local/go), or
# Debian's golang-go, which then fetches the go.mod toolchain through the Go
# module proxy (GOTOOLCHAIN=auto needs Go >= 1.21).
ensure_go() {
  export PATH=$PATH:/usr/local/go/bin:$HOME/go/bin
  if ! command -v go >/dev/null 2>&1; then
    echo "hack: no Go toolchain found; installing Debian's golang-go" >&2
    apt_install golang-go
  fi
  export GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOFLAGS=${GOFLAGS:--buildvcs=false}
  go version >/dev/null || { echo "hack: go does not run" >&2; exit 1; }
}

# vcs_ldflags prints the -X flags that name the checkout's commit in the
# binary (pinfold version), as Go's VCS stamping would: -buildvcs=false (set
# above, and on the development machines) turns that stamping off. Nothing
# outside a git checkout.
vcs_ldflags() {
  local rev at mod=false
  rev=$(git rev-parse HEAD 2>/dev/null) || return 0
  at=$(TZ=UTC0 git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null || true)
  [ -z "$(git status --porcelain 2>/dev/null)" ] || mod=true
  printf -- '-X main.commit=%s -X main.commitTime=%s -X main.modified=%s\n' "$rev" "$at" "$mod"
}

# apt_install PKG… installs the Debian packages that are not installed yet.
apt_install() {
  local need=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
  ((${#need[@]})) || return 0
  local sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
  if [ -z "$(ls /var/lib/apt/lists/ 2>/dev/null | grep -i _Packages | head -1)" ]; then
    $sudo apt-get update -q
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${need[@]}"
}
