#!/bin/sh
# podsim run --report DIR: one self-contained page (no scripts, nothing
# loaded from anywhere but DIR), rendered by headless Chromium from disk:
# the screenshot must not be blank and the page must log nothing to the
# console. A page that does log is caught (the check can fail). Chromium
# comes from setup.sh (Debian's chromium); without it the rendering part
# is skipped (exit 77) after the page checks.
. "$PS_SRCDIR/tests/lib.sh"
STATS="$PS_BUILDDIR/tests/png_stats"
R="$PS_TMP/report"
expect_status 0 "$PODSIM" run -q --preset DenseLm128B8x8 --layers 2 --report "$R"
for f in index.html config.ini timeline.json; do [ -s "$R/$f" ] || fail "--report wrote no $f"; done
expect_grep "<h1>DenseLm128B8x8 modified (layers)</h1>" "$R/index.html"
expect_grep "Most expensive collectives" "$R/index.html"
expect_grep 'href="timeline.json"' "$R/index.html"
expect_grep "podsim run -q --preset DenseLm128B8x8 --layers 2 --report" "$R/index.html"
[ "$(grep -c '<svg' "$R/index.html")" = 2 ] || fail "the page should inline two SVG pictures"
# Self-contained: no script, no stylesheet or image from elsewhere, and the
# two pictures' ids kept apart.
# (SVG's xmlns names are names, not loads.)
sed 's/xmlns\(:[a-z]*\)\{0,1\}="[^"]*"//g' "$R/index.html" >"$PS_TMP/page"
if grep -qiE '<script|<link|<img|<iframe|<object|src=|url\(https?:' "$PS_TMP/page"; then
  fail "the page loads something: $(grep -oiE '<script|<link|<img|<iframe|<object|src=[^ ]*|url.https?:[^)]*' "$PS_TMP/page" | head -3)"
fi
expect_grep 'id="links-glyph0-1"' "$R/index.html"
expect_grep 'id="bars-glyph0-1"' "$R/index.html"
# The link map fits the window (its shape kept), and the memory block
# wraps its long lines instead of scrolling sideways.
expect_grep 'class="links" style="max-width:100%;height:auto">' "$R/index.html"
expect_grep 'svg.links{max-height:85vh;width:auto}' "$R/index.html"
expect_grep '<h2>Memory</h2>
<pre class="memory">' "$R/index.html"
expect_grep 'pre.memory{white-space:pre-wrap;overflow-wrap:anywhere;overflow-x:visible}' "$R/index.html"
# The configuration reruns as written.
expect_status 0 "$PODSIM" run --config "$R/config.ini" --print-config
expect_grep "layers = 2" "$PS_TMP/out"
head -c 1 "$R/timeline.json" | grep -q '[[{]' || fail "timeline.json is not JSON"
# A failing run leaves no report behind.
expect_status 2 "$PODSIM" run -q --heads 6 --report "$PS_TMP/bad"
[ -e "$PS_TMP/bad" ] && fail "a failed run left a report"
# A model that does not fit still gets its page (why, and the memory
# breakdown), with its configuration and no timeline; the run fails.
expect_status 2 "$PODSIM" run -q --preset DenseLm128B8x8 --layers 512 --report "$PS_TMP/nofit"
[ -s "$PS_TMP/nofit/index.html" ] || fail "a model that does not fit got no report"
expect_grep "<h2>Does not fit</h2>" "$PS_TMP/nofit/index.html"
expect_grep "exceeds the HBM capacity" "$PS_TMP/nofit/index.html"
expect_grep "layers.w1 " "$PS_TMP/nofit/index.html"
[ -s "$PS_TMP/nofit/config.ini" ] || fail "the no-fit report has no config.ini"
[ -e "$PS_TMP/nofit/timeline.json" ] && fail "the no-fit report has a timeline"
# The MoE figures (all-to-all, gating) and the pipeline's (bubble) that the
# terminal prints are on the page too; and why exposed communication can
# exceed communication.
expect_status 0 "$PODSIM" run -q moe --report "$PS_TMP/moe"
expect_grep "<th>all-to-all</th>" "$PS_TMP/moe/index.html"
expect_grep "<th>by op_name: gating</th>" "$PS_TMP/moe/index.html"
expect_status 0 "$PODSIM" run -q --pipeline-stages 4 --layers 8 --batch 32 --microbatches 16 --mesh 2x4 \
  --slice v3-32 --report "$PS_TMP/pp"
expect_grep "(exposed > communication: exposed also counts" "$PS_TMP/out"
expect_grep "<h2>Pipeline</h2>" "$PS_TMP/pp/index.html"
expect_grep "bubble (K-1)/(M+K-1)" "$PS_TMP/pp/index.html"
grep -q "exposed &gt; communication: exposed also counts waiting" "$PS_TMP/pp/index.html" \
  || fail "the pipelined page does not say why exposed communication exceeds communication"
# --memory-only prints the breakdown when it does not fit, and fails.
expect_status 2 "$PODSIM" run --preset DenseLm128B8x8 --layers 512 --memory-only
expect_grep "(217 %): does not fit" "$PS_TMP/out"
expect_grep "f32[512,1024,4096]" "$PS_TMP/out"

chrome=""
for c in chromium chromium-browser; do command -v "$c" >/dev/null 2>&1 && { chrome=$c; break; }; done
if [ -z "$chrome" ]; then
  [ "$ps_failures" = 0 ] || finish
  echo "SKIP: Chromium not installed (setup.sh installs Debian's chromium): the page was not rendered"
  exit 77
fi
render () {  # PAGE PNG LOG
  timeout 180 "$chrome" --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --disable-sync --no-first-run --user-data-dir="$PS_TMP/profile.$$" \
    --enable-logging=stderr --v=0 --window-size=1200,2400 --screenshot="$2" "file://$1" >"$3" 2>&1
}
# The check itself: a page that logs to the console is caught.
printf '<!DOCTYPE html><html><body><p>x</p><script>console.error("broken page")</script></body></html>\n' \
  >"$PS_TMP/bad.html"
render "$PS_TMP/bad.html" "$PS_TMP/bad.png" "$PS_TMP/bad.log" || fail "chromium failed on the control page"
grep -q ':CONSOLE' "$PS_TMP/bad.log" || fail "console messages are not seen in Chromium's log: the check cannot fail"
# The report.
render "$R/index.html" "$PS_TMP/shot.png" "$PS_TMP/chrome.log" || { fail "chromium failed"; tail -5 "$PS_TMP/chrome.log" >&2; }
if grep -q ':CONSOLE' "$PS_TMP/chrome.log"; then
  fail "the page logged to the console: $(grep ':CONSOLE' "$PS_TMP/chrome.log" | head -3)"
fi
set -- $("$STATS" "$PS_TMP/shot.png")
[ "${1:-0}" = 1200 ] || fail "screenshot is ${1:-?} px wide, not 1200"
# Not blank: thousands of non-white pixels in many colors (text, tables,
# the colormap of the link picture).
[ "${3:-0}" -gt 50000 ] || fail "screenshot nearly blank: ${3:-0} non-white pixels"
[ "${4:-0}" -gt 100 ] || fail "screenshot has only ${4:-0} colors"
finish
