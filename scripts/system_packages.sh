#!/usr/bin/env bash
# The system packages some tests need: Debian's bubblewrap (the eval sandbox's isolation) and chromium (the
# chat page's browser test). As root with apt, installs what is missing; otherwise says, in one line, what
# to install: those tests then skip with that reason (CI sets K3_REQUIRE_SANDBOX=1, where they must run).
set -euo pipefail
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "k3: installing ${need[*]} (Debian packages the tests need)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
else
  echo "k3: some tests will skip: install ${need[*]} (e.g. sudo apt-get install ${need[*]})" >&2
fi
