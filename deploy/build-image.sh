#!/usr/bin/env bash
# Build adapter_critic's container image from this checkout (the Dockerfile at the repository's top).
#
#   deploy/build-image.sh                     # docker build: the official python:3.11-slim, packages from PyPI
#   deploy/build-image.sh --offline           # nothing pulled, nothing downloaded by the build (CI does this):
#       - the base image is a Debian bookworm made here with debootstrap (--variant=minbase, python3, python3-venv,
#         ca-certificates) from this machine's configured Debian mirror and `docker import`ed as
#         adapter-critic-base:bookworm, once (skipped when that tag exists);
#       - the package's dependencies are built on this machine into deploy/wheelhouse (`pip wheel`), which the
#         build installs from with --no-index; its containers have no network at all (--network none).
#
# Options: --tag NAME (default adapter-critic:latest), --base IMAGE (the BASE build argument; with --offline it
# replaces the debootstrap base). Environment: PYTHON (the Python whose pip builds the wheelhouse, default python3:
# it must be the base's Python version, 3.11 for bookworm, for compiled wheels to fit), DEBIAN_MIRROR (default:
# the first bookworm mirror in /etc/apt/sources.list*), DOCKER (default docker).
#
# Prints the build's seconds and the image's size at the end. Needs a running Docker daemon.
set -euo pipefail
cd "$(dirname "$0")/.."

tag="adapter-critic:latest"
base=""
offline=0
while [ $# -gt 0 ]; do
  case "$1" in
    --offline) offline=1 ;;
    --tag) tag="$2"; shift ;;
    --base) base="$2"; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "build-image.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
docker="${DOCKER:-docker}"
python="${PYTHON:-python3}"
debian_base="adapter-critic-base:bookworm"

# The first mirror serving bookworm itself (not bookworm-security) in the machine's apt sources, deb822 or one-line.
debian_mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  local file uris suites line
  for file in /etc/apt/sources.list.d/*.sources; do
    [ -f "$file" ] || continue
    uris=""; suites=""
    while IFS= read -r line || [ -n "$line" ]; do
      case "$line" in
        URIs:*) uris="${line#URIs:}" ;;
        Suites:*) suites="${line#Suites:}" ;;
        "")
          if [[ " $suites " == *" bookworm "* ]]; then echo "${uris# }" | awk '{print $1}'; return; fi
          uris=""; suites="" ;;
      esac
    done < "$file"
    if [[ " $suites " == *" bookworm "* ]]; then echo "${uris# }" | awk '{print $1}'; return; fi
  done
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$file" ] || continue
    line="$(grep -E '^deb +(\[[^]]*\] +)?[a-z]+://[^ ]+ +bookworm( |$)' "$file" | head -n1 || true)"
    if [ -n "$line" ]; then echo "$line" | sed -E 's/^deb +(\[[^]]*\] +)?//' | awk '{print $1}'; return; fi
  done
  echo "build-image.sh: no bookworm mirror in /etc/apt/sources.list*; set DEBIAN_MIRROR" >&2
  return 1
}

# A Debian bookworm with Python made by debootstrap and imported as an image, unless that image is there already.
make_debian_base() {
  if "$docker" image inspect "$debian_base" >/dev/null 2>&1; then
    echo "== base image $debian_base: cached"
    return
  fi
  local mirror root
  mirror="$(debian_mirror)"
  root="$(mktemp -d)"
  echo "== debootstrap bookworm (minbase, python3, python3-venv, ca-certificates) from $mirror"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$root/rootfs" "$mirror" \
    > "$root/debootstrap.log" 2>&1 || { tail -n 30 "$root/debootstrap.log" >&2; rm -rf "$root"; return 1; }
  # What no container needs: the downloaded packages, apt's lists, documentation, manual pages, translations.
  rm -rf "$root/rootfs"/var/cache/apt/archives/*.deb "$root/rootfs"/var/cache/apt/*.bin \
    "$root/rootfs"/var/lib/apt/lists/* "$root/rootfs"/usr/share/doc/* "$root/rootfs"/usr/share/man/* \
    "$root/rootfs"/usr/share/locale/*
  tar --numeric-owner -C "$root/rootfs" -c . | "$docker" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' - "$debian_base" >/dev/null
  rm -rf "$root"
  echo "== base image $debian_base: imported"
}

# deploy/wheelhouse: the runtime dependencies (pinned in requirements.txt) and the build backend, as wheels.
make_wheelhouse() {
  local want have tmp project
  want="$("$docker" run --rm --network none "$base" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  have="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  if [ "$want" != "$have" ]; then
    echo "build-image.sh: the base's Python is $want but $python is $have: set PYTHON to a Python $want" >&2
    return 1
  fi
  tmp="$(mktemp -d)"
  echo "== wheelhouse: pip wheel '.[server,postgres]' and hatchling with $python ($have)"
  "$python" -m pip wheel --quiet --no-deps --wheel-dir "$tmp/project" .
  project="$(ls "$tmp"/project/adapter_critic-*.whl)"
  "$python" -m pip wheel --quiet --wheel-dir "$tmp/wheels" "$project[server,postgres]"
  rm -f "$tmp"/wheels/adapter_critic-*.whl
  # name==version of each wheel: what the image installs (sorted: the same wheels give the same file, and the
  # build's cached layer stays valid).
  for wheel in "$tmp"/wheels/*.whl; do
    wheel="$(basename "$wheel")"
    echo "$wheel" | awk -F- '{print $1 "==" $2}'
  done | sort > "$tmp/requirements.txt"
  "$python" -m pip wheel --quiet --wheel-dir "$tmp/wheels" hatchling
  find deploy/wheelhouse -mindepth 1 ! -name .gitignore -delete
  mv "$tmp"/wheels/*.whl "$tmp/requirements.txt" deploy/wheelhouse/
  rm -rf "$tmp"
}

started=$(date +%s)
# The build stage is tagged too, so its layers (the installed dependencies) stay cached for the next build, and the
# images this build replaces are removed instead of piling up untagged.
stage_tag="${tag%:*}:build-stage"
replaced=()
for name in "$tag" "$stage_tag"; do
  id="$("$docker" image inspect --format '{{.Id}}' "$name" 2>/dev/null || true)"
  [ -n "$id" ] && replaced+=("$id")
done
build() {
  "$docker" build --target build --tag "$stage_tag" "$@" >/dev/null
  "$docker" build --tag "$tag" "$@"
}
if [ "$offline" -eq 1 ]; then
  if [ -z "$base" ]; then
    make_debian_base
    base="$debian_base"
  fi
  make_wheelhouse
  echo "== docker build $tag (BASE=$base, no network)"
  export DOCKER_BUILDKIT=0  # the classic builder: the same with a 20.10 daemon and without buildx
  build --network none --build-arg "BASE=$base" .
else
  find deploy/wheelhouse -mindepth 1 ! -name .gitignore -delete  # from the index, not an old wheelhouse
  echo "== docker build $tag${base:+ (BASE=$base)}"
  build ${base:+--build-arg "BASE=$base"} .
fi
for id in "${replaced[@]}"; do
  if ! "$docker" image inspect --format '{{.RepoTags}}' "$id" 2>/dev/null | grep -q ':'; then
    "$docker" rmi "$id" >/dev/null 2>&1 || true  # untagged now; kept only while a container still uses it
  fi
done
size="$("$docker" image inspect --format '{{.Size}}' "$tag")"
echo "== built $tag in $(( $(date +%s) - started )) s: $(( size / 1000000 )) MB"
