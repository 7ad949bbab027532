#!/usr/bin/env bash
# Checks an installed PipeStudio: the files a package ships are there, valid, and agree with each
# other (desktop entry <-> MIME type <-> icon <-> AppStream), and the installed executable runs.
#
#   validate_install.sh VERSION PREFIX                    an installed tree, e.g. /usr after dpkg -i
#   validate_install.sh VERSION --from-build BUILD_DIR    cmake --install BUILD_DIR into a temporary
#                                                         prefix first (no root; what CTest runs)
#
# Validators that are not installed (desktop-file-validate, appstreamcli, update-mime-database,
# gio) are reported as skipped; installer/deps.sh installs them for the test suite.
set -euo pipefail

version=${1:?usage: $0 VERSION PREFIX | VERSION --from-build BUILD_DIR}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "${2:-}" = "--from-build" ]; then
  cmake --install "${3:?build dir}" --prefix "$work/usr" >/dev/null
  prefix=$work/usr
else
  prefix=${2:?prefix}
fi

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
skip() { echo "skipped: $* (not installed)"; }
have() { command -v "$1" >/dev/null 2>&1; }

mime_type=application/x-pipestudio-project
desktop=$prefix/share/applications/pipestudio.desktop
mime_xml=$prefix/share/mime/packages/pipestudio.xml
metainfo=$prefix/share/metainfo/io.pipestudio.PipeStudio.metainfo.xml
files=(
  "$prefix/bin/pipestudio"
  "$desktop"
  "$mime_xml"
  "$metainfo"
  "$prefix/share/icons/hicolor/scalable/apps/pipestudio.svg"
  "$prefix/share/icons/hicolor/256x256/apps/pipestudio.png"
  "$prefix/share/pipestudio/python/pipestudio_trace.py"
)
for f in "${files[@]}"; do
  [ -f "$f" ] || fail "missing $f"
done
[ -x "$prefix/bin/pipestudio" ] || fail "$prefix/bin/pipestudio is not executable"
echo "ok: ${#files[@]} files under $prefix"

# The executable runs from the install tree (no build-tree RUNPATH to lean on).
out=$("$prefix/bin/pipestudio" --version)
[ "$out" = "pipestudio $version" ] || fail "--version printed '$out', expected 'pipestudio $version'"
echo "ok: $out"

# Desktop entry: launches the installed program with a file, names the MIME type and the icon.
grep -qx "Exec=pipestudio gui %f" "$desktop" || fail "$desktop: Exec is not 'pipestudio gui %f'"
grep -qx "MimeType=$mime_type;" "$desktop" || fail "$desktop: MimeType is not $mime_type"
grep -qx "Icon=pipestudio" "$desktop" || fail "$desktop: Icon is not pipestudio"
if have desktop-file-validate; then
  desktop-file-validate "$desktop" || fail "desktop-file-validate $desktop"
  echo "ok: desktop-file-validate"
else
  skip desktop-file-validate
fi
# `pipestudio gui FILE` must accept a project, the way the file manager calls it.
"$prefix/bin/pipestudio" gui --help | grep -q "project" || fail "pipestudio gui takes no project argument"

# MIME type: glob and magic (SQLite header + application_id "PStd" at offset 68) both identify a
# project written by the installed executable; a plain SQLite database is not taken for one.
grep -q "type=\"$mime_type\"" "$mime_xml" || fail "$mime_xml does not define $mime_type"
"$prefix/bin/pipestudio" new -m gpt2-tiny -o "$work/p.pstudio" >/dev/null
[ "$(od -A n -t x1 -j 68 -N 4 "$work/p.pstudio" | tr -d ' ')" = 50537464 ] ||
  fail "a new project has no application_id 0x50537464 at byte 68 (the MIME magic relies on it)"
if have update-mime-database && [ -f /usr/share/mime/packages/freedesktop.org.xml ]; then
  mkdir -p "$work/xdg/mime/packages"
  cp /usr/share/mime/packages/freedesktop.org.xml "$mime_xml" "$work/xdg/mime/packages/"
  update-mime-database "$work/xdg/mime" >"$work/mime.log" 2>&1 || {
    cat "$work/mime.log"
    fail "update-mime-database rejects $mime_xml"
  }
  grep -qx "50:$mime_type:\*.pstudio" "$work/xdg/mime/globs2" || fail "no *.pstudio glob after update-mime-database"
  echo "ok: update-mime-database"
  if have gio; then
    cp "$work/p.pstudio" "$work/no-extension"
    { printf 'SQLite format 3\000' && head -c 4080 /dev/zero; } >"$work/plain.sqlite" # any other database
    sniff() { XDG_DATA_HOME="$work/xdg" XDG_DATA_DIRS="$work/xdg" gio info -a standard::content-type "$1" |
      sed -n 's/.*standard::content-type: //p'; }
    [ "$(sniff "$work/p.pstudio")" = $mime_type ] || fail "gio: p.pstudio is $(sniff "$work/p.pstudio")"
    [ "$(sniff "$work/no-extension")" = $mime_type ] || fail "gio: magic missed, $(sniff "$work/no-extension")"
    [ "$(sniff "$work/plain.sqlite")" != $mime_type ] || fail "gio: a plain SQLite file matched the project magic"
    echo "ok: gio identifies projects by name and by content"
  else
    skip "gio (content sniffing)"
  fi
else
  skip update-mime-database
fi

# AppStream: valid, launches this desktop file, provides this binary and MIME type.
grep -q "<launchable type=\"desktop-id\">pipestudio.desktop</launchable>" "$metainfo" || fail "metainfo launchable"
grep -q "<binary>pipestudio</binary>" "$metainfo" || fail "metainfo provides no binary"
grep -q "<mediatype>$mime_type</mediatype>" "$metainfo" || fail "metainfo provides no $mime_type"
if have appstreamcli; then
  appstreamcli validate --no-net "$metainfo" >"$work/appstream.log" 2>&1 || {
    cat "$work/appstream.log"
    fail "appstreamcli validate $metainfo"
  }
  echo "ok: appstreamcli validate"
else
  skip appstreamcli
fi
echo "install tree OK"
