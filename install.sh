#!/bin/sh
# Installs the `baton` and `baton-service` programs from a release archive
# (.github/workflows/release.yml): picks the archive built for this machine,
# downloads it and its .sha256, refuses it unless the checksum matches (and
# the SHA256SUMS of the programs inside), then installs both programs.
#
#   sh install.sh --base-url URL [--version TAG] [--to DIR] [--target TRIPLE]
#
#   --base-url URL  where the release's files are (http(s):// or file://);
#                   also BATON_RELEASE_URL. The archive is
#                   URL/baton-TAG-TRIPLE.tar.gz, its checksum URL/...tar.gz.sha256.
#   --version TAG   the release tag, e.g. v0.1.0 (also BATON_VERSION)
#   --to DIR        where to install (default: $HOME/.local/bin; also BATON_INSTALL_DIR)
#   --target TRIPLE the build to install instead of this machine's
#                   (Linux: the static musl build, which runs on any distribution)
#
# Needs curl or wget, tar, and sha256sum or shasum. Writes nothing outside
# DIR and a temporary directory it removes.
set -eu

base_url="${BATON_RELEASE_URL:-}"
version="${BATON_VERSION:-v0.1.0}"
to="${BATON_INSTALL_DIR:-${HOME:-}/.local/bin}"
target=""

die() { echo "install.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --base-url) [ $# -ge 2 ] || die "--base-url needs a URL"; base_url="$2"; shift 2 ;;
        --version) [ $# -ge 2 ] || die "--version needs a tag"; version="$2"; shift 2 ;;
        --to) [ $# -ge 2 ] || die "--to needs a directory"; to="$2"; shift 2 ;;
        --target) [ $# -ge 2 ] || die "--target needs a target triple"; target="$2"; shift 2 ;;
        -h|--help) sed -n '2,21p' "$0" 2>/dev/null | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
# The project has no public home yet, so no default location.
[ -n "$base_url" ] || die "no release location: give --base-url URL (or BATON_RELEASE_URL)"
[ -n "$to" ] || die "no install directory: give --to DIR (HOME is not set)"

if [ -z "$target" ]; then
    os="$(uname -s)"
    arch="$(uname -m)"
    case "$arch" in
        x86_64|amd64) arch=x86_64 ;;
        aarch64|arm64) arch=aarch64 ;;
        *) die "no release build for processor '$arch'; build from source (cargo install --path crates/baton-cli)" ;;
    esac
    case "$os" in
        Linux) target="$arch-unknown-linux-musl" ;;
        Darwin) target="$arch-apple-darwin" ;;
        *) die "no release archive for '$os' here (Windows: use the .zip of the release, or pip install the wheel)" ;;
    esac
fi

fetch() {  # URL FILE
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL --proto '=https,http,file' -o "$2" "$1"
    elif command -v wget >/dev/null 2>&1; then
        case "$1" in
            file://*) cp "${1#file://}" "$2" ;;
            *) wget -q -O "$2" "$1" ;;
        esac
    else
        die "neither curl nor wget is installed"
    fi
}

sha256_of() {  # FILE -> hex digest
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    elif command -v shasum >/dev/null 2>&1; then
        shasum -a 256 "$1" | cut -d' ' -f1
    else
        die "neither sha256sum nor shasum is installed: cannot verify the download"
    fi
}

name="baton-$version-$target"
archive="$name.tar.gz"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/baton-install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT INT TERM

fetch "${base_url%/}/$archive" "$tmp/$archive" || die "cannot download ${base_url%/}/$archive"
fetch "${base_url%/}/$archive.sha256" "$tmp/$archive.sha256" \
    || die "cannot download ${base_url%/}/$archive.sha256 (refusing to install unverified)"
want="$(cut -d' ' -f1 "$tmp/$archive.sha256")"
got="$(sha256_of "$tmp/$archive")"
[ -n "$want" ] && [ "$want" = "$got" ] \
    || die "checksum mismatch for $archive: expected ${want:-nothing}, got $got; nothing installed"

mkdir "$tmp/x"
tar -xzf "$tmp/$archive" -C "$tmp/x" || die "cannot unpack $archive"
dir="$tmp/x/$name"
[ -f "$dir/SHA256SUMS" ] || die "$archive has no $name/SHA256SUMS; nothing installed"
for prog in baton baton-service; do
    [ -f "$dir/$prog" ] || die "$archive has no $name/$prog; nothing installed"
    want="$(grep " \*\{0,1\}$prog\$" "$dir/SHA256SUMS" | cut -d' ' -f1)"
    [ -n "$want" ] && [ "$want" = "$(sha256_of "$dir/$prog")" ] \
        || die "checksum mismatch for $prog in $archive; nothing installed"
done

mkdir -p "$to"
for prog in baton baton-service; do
    # Next to the target, then renamed: a running baton is never half written.
    cp "$dir/$prog" "$to/.$prog.new"
    chmod 755 "$to/.$prog.new"
    mv -f "$to/.$prog.new" "$to/$prog"
done
echo "installed $("$to/baton" --version) ($target) in $to"
case ":${PATH:-}:" in
    *":$to:"*) ;;
    *) echo "note: $to is not on your PATH" >&2 ;;
esac
