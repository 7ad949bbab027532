#!/usr/bin/env bash
# Regenerates the committed PNG icon from resources/icons/pipestudio.svg. The build does not run
# this (no SVG renderer is needed to build or package); run it after editing the SVG.
# Needs rsvg-convert: apt-get install --no-install-recommends librsvg2-bin
set -euo pipefail
cd "$(dirname "$0")/.."
size=256 # the hicolor size installer/CMakeLists.txt installs besides scalable/
mkdir -p "resources/icons/${size}x${size}"
rsvg-convert -w "$size" -h "$size" resources/icons/pipestudio.svg -o "resources/icons/${size}x${size}/pipestudio.png"
