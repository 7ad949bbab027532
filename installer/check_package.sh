#!/usr/bin/env bash
# Packages an existing build tree (no second compile: cpack's preinstall step finds everything up
# to date), then checks the .deb end to end on this machine: dpkg -i, the installed files, the
# program and the headless demo run from /usr/bin, Debian's triggers registered the MIME type and
# desktop entry, dpkg -r removes every file again. CI runs it (as root) after the test suite.
#
#   installer/check_package.sh [BUILD_DIR]     default build/ci; packages land in BUILD_DIR/packages
#
# Skips, saying why, when not root or without dpkg, and when a pipestudio package or a
# /usr/bin/pipestudio is already on the machine (it would be replaced and then removed).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/ci}

skip() {
  echo "package check: SKIPPED: $*"
  exit 0
}
fail() {
  echo "package check: FAIL: $*" >&2
  exit 1
}
[ "$(id -u)" -eq 0 ] || skip "needs root for dpkg -i / dpkg -r"
if ! command -v dpkg >/dev/null || ! command -v dpkg-shlibdeps >/dev/null; then
  skip "dpkg or dpkg-shlibdeps not available"
fi
if dpkg-query -W -f='${Status}' pipestudio 2>/dev/null | grep -q "ok installed"; then
  skip "a pipestudio package is already installed here; not replacing it"
fi
[ ! -e /usr/bin/pipestudio ] || skip "/usr/bin/pipestudio already exists; not replacing it"
[ -f "$build/CPackConfig.cmake" ] || fail "$build is not a configured build tree"

version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
rm -rf "$build/packages"
cpack --config "$build/CPackConfig.cmake" -B "$build/packages" >"$build/cpack.log" 2>&1 || {
  cat "$build/cpack.log"
  fail "cpack"
}
deb=$(ls "$build"/packages/pipestudio_*.deb)
tgz=$(ls "$build"/packages/pipestudio-*.tar.gz)
ls -l "$deb" "$tgz"

# Stripped (CPACK_STRIP_FILES): build/ci's executable carries the CUDA sources' host DWARF.
size_bytes=$(stat -c %s "$deb")
[ "$size_bytes" -lt $((50 * 1024 * 1024)) ] || fail "$deb is $size_bytes bytes: debug info not stripped?"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
echo "$depends" | grep -q "libqt6widgets6" || fail "Depends lacks libqt6widgets6"
echo "$depends" | grep -q "libqcustomplot2.1-qt6" || fail "Depends lacks libqcustomplot2.1-qt6"
if echo "$depends" | grep -Eiq "cuda|cupti|nccl|nvidia|cudnn|cublas"; then
  fail "CUDA must stay optional, but Depends names it"
fi
tar -tzf "$tgz" | grep -q "/bin/pipestudio$" || fail "$tgz has no bin/pipestudio"

mapfile -t shipped < <(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $6 }')
echo "${#shipped[@]} files in the .deb"

installed=0
cleanup() { if [ "$installed" = 1 ]; then dpkg -r pipestudio >/dev/null 2>&1 || true; fi; }
trap cleanup EXIT
export DEBIAN_FRONTEND=noninteractive
installed=1
if ! dpkg -i "$deb"; then
  echo "dpkg -i left dependencies unresolved; trying apt-get -f install"
  apt-get install -f -y -qq --no-install-recommends
  dpkg-query -W -f='${Status}' pipestudio | grep -q "ok installed" || fail "dpkg -i $deb"
fi

[ "$(command -v pipestudio)" = /usr/bin/pipestudio ] || fail "pipestudio on PATH is '$(command -v pipestudio)'"
bash tests/packaging/validate_install.sh "$version" /usr

demo_dir=$(mktemp -d)
env -u DISPLAY -u WAYLAND_DISPLAY -u QT_QPA_PLATFORM /usr/bin/pipestudio demo --dir "$demo_dir" >"$demo_dir/demo.log" 2>&1 || {
  cat "$demo_dir/demo.log"
  fail "/usr/bin/pipestudio demo"
}
grep -q "identical after reload: yes" "$demo_dir/demo.log" || fail "demo: project did not round-trip"
grep -E "^   loss .* nats" "$demo_dir/demo.log" || fail "demo: no training summary"
echo "ok: /usr/bin/pipestudio demo"
# The GUI starts from the package too (Qt plugins found through the system Qt, no build tree).
if HOME="$demo_dir" QT_QPA_PLATFORM=offscreen /usr/bin/pipestudio gui --model gpt2-tiny \
  --screenshot "$demo_dir/gui.png" >"$demo_dir/gui.log" 2>&1; then
  [ -s "$demo_dir/gui.png" ] || fail "gui --screenshot wrote no PNG"
  echo "ok: /usr/bin/pipestudio gui --screenshot (offscreen)"
elif grep -q "this build has no GUI" "$demo_dir/gui.log"; then
  echo "skipped: GUI screenshot (built without the GUI)"
else
  cat "$demo_dir/gui.log"
  fail "/usr/bin/pipestudio gui --screenshot"
fi
rm -rf "$demo_dir"

# dpkg's file triggers (no maintainer scripts in the package) updated the system caches.
if [ -f /usr/share/mime/globs2 ] && dpkg-query -W shared-mime-info >/dev/null 2>&1; then
  grep -q "application/x-pipestudio-project:\*.pstudio" /usr/share/mime/globs2 || fail "MIME database not updated"
  echo "ok: shared-mime-info trigger registered *.pstudio"
fi
if dpkg-query -W -f='${Status}' desktop-file-utils 2>/dev/null | grep -q "ok installed"; then
  grep -q "application/x-pipestudio-project=pipestudio.desktop" /usr/share/applications/mimeinfo.cache ||
    fail "desktop database not updated"
  echo "ok: desktop-file-utils trigger registered pipestudio.desktop"
fi

dpkg -r pipestudio
installed=0
if dpkg-query -W -f='${Status}' pipestudio 2>/dev/null | grep -q "ok installed"; then
  fail "still installed after dpkg -r"
fi
for f in "${shipped[@]}"; do
  [ ! -e "$f" ] || fail "$f left behind after dpkg -r"
done
[ ! -e /usr/share/pipestudio ] || fail "/usr/share/pipestudio left behind after dpkg -r"
if [ -f /usr/share/mime/globs2 ] && grep -q "pipestudio-project" /usr/share/mime/globs2; then
  fail "MIME type still registered after dpkg -r"
fi
echo "ok: dpkg -r removed all ${#shipped[@]} files"
echo "package check: PASSED ($(basename "$deb"))"
