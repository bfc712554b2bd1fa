//go:build unix

package report

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The pages are opened in a real headless Chromium: it must render them
// (a PNG that is not blank, with the chart colours in it), its DOM must hold
// the page title, and it must log no console message for the page.
//
// The console check, exactly: Chromium is run with --enable-logging=stderr
// --v=0, which logs every console message of the page on stderr as
//
//	[pid:tid:time:INFO:CONSOLE:3] "message", source: file:///…/report.html (3)
//
// Chromium 156 logs console.error, uncaught exceptions and Content Security
// Policy violations all at INFO, so filtering on level ERROR would never
// match. The check is stricter: a stderr line fails the test if it contains
// "Uncaught", or if it contains "CONSOLE" and the page's file:// URL. The
// pages have no script and their CSP allows nothing but the inline style,
// so any console message from them is a script, a fetch or an error. Other
// stderr noise (D-Bus, GPU, the Debian wrapper script) names no page and
// is ignored. TestChromiumConsoleCheckCatchesErrors proves the check fires
// on this browser.

// chromiumNames are looked up on PATH, in order.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

func findChromium(t *testing.T) string {
	t.Helper()
	for _, n := range chromiumNames {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	t.Skipf("chromium not installed: none of %s is on PATH (CI installs it: apt-get install -y chromium)", strings.Join(chromiumNames, ", "))
	return ""
}

type chromiumRun struct {
	dom, stderr, url string
	png              image.Image
	pngPath          string
}

// openInChromium writes page to a temp file, opens it in headless Chromium
// and returns the dumped DOM, stderr and the decoded 1280×1600 screenshot.
func openInChromium(t *testing.T, bin, name, page string) chromiumRun {
	t.Helper()
	return openInChromiumAt(t, bin, name, page, 1280, 1600)
}

// openInChromiumAt is openInChromium with a w×h window: the viewport, and
// the screenshot's size.
func openInChromiumAt(t *testing.T, bin, name, page string, w, h int) chromiumRun {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, name+".html")
	require.NoError(t, os.WriteFile(file, []byte(page), 0o644))
	shot := filepath.Join(dir, name+".png")
	url := "file://" + file
	profile := filepath.Join(dir, "profile")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic", "--user-data-dir="+profile,
		"--screenshot="+shot, fmt.Sprintf("--window-size=%d,%d", w, h), "--hide-scrollbars", "--enable-logging=stderr", "--v=0", "--dump-dom", url)
	// Chromium starts helper processes: run it in its own process group and
	// kill the group on timeout; keep it out of the real home directory.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+filepath.Join(dir, "config"), "XDG_CACHE_HOME="+filepath.Join(dir, "cache"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("chromium did not finish in 60s; stderr:\n%s", stderr.String())
	}
	require.NoError(t, err, "chromium failed; stderr:\n%s", stderr.String())

	f, err := os.Open(shot)
	require.NoError(t, err, "no screenshot; stderr:\n%s", stderr.String())
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err, "screenshot is not a PNG")
	return chromiumRun{dom: stdout.String(), stderr: stderr.String(), url: url, png: img, pngPath: shot}
}

// consoleProblems returns the stderr lines that fail the console check (see
// the comment at the top of this file).
func consoleProblems(stderr, url string) []string {
	var out []string
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, "Uncaught") || (strings.Contains(line, "CONSOLE") && strings.Contains(line, url)) {
			out = append(out, line)
		}
	}
	return out
}

// near reports whether c is within tol of (r, g, b) on each channel.
func near(c [3]int, r, g, b, tol int) bool {
	d := func(a, b int) bool { return a-b <= tol && b-a <= tol }
	return d(c[0], r) && d(c[1], g) && d(c[2], b)
}

type pixelStats struct {
	total, nonWhite int
	// count is pixels near each named colour (light or dark palette).
	count map[string]int
}

// palette is the chart colours of html.go's CSS, light and dark.
var palette = map[string][][3]int{
	"refused":  {{0xc6, 0x28, 0x28}, {0xff, 0x7b, 0x72}},
	"repaired": {{0x2e, 0x7d, 0x32}, {0x56, 0xd3, 0x64}},
	"reported": {{0xa1, 0x5c, 0x00}, {0xe3, 0xb3, 0x41}},
	"line":     {{0x0b, 0x5c, 0xad}, {0x58, 0xa6, 0xff}},
}

func pixels(img image.Image) pixelStats {
	s := pixelStats{count: map[string]int{}}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			c := [3]int{int(r >> 8), int(g >> 8), int(bl >> 8)}
			s.total++
			if c[0] < 245 || c[1] < 245 || c[2] < 245 {
				s.nonWhite++
			}
			for name, cols := range palette {
				for _, p := range cols {
					if near(c, p[0], p[1], p[2], 24) {
						s.count[name]++
						break
					}
				}
			}
		}
	}
	return s
}

func saveScreenshot(t *testing.T, run chromiumRun, name string) {
	t.Helper()
	if !*update {
		return
	}
	dir := filepath.Join("testdata", "screenshots")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	b, err := os.ReadFile(run.pngPath)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), b, 0o644))
}

func TestChromiumRendersPages(t *testing.T) {
	bin := findChromium(t)
	var report, history bytes.Buffer
	require.NoError(t, RenderHTML(&report, sample()))
	require.NoError(t, RenderHistoryHTML(&history, historyRuns()))

	for _, c := range []struct {
		name, page, title string
		colours           []string
		dom               []string
	}{
		{"report", report.String(), "Reconciliation report: runs 7, 8, 9", []string{"refused", "repaired", "reported"},
			[]string{"pi_1", "pi_6", "No drift was found before the run stopped", `data-kind="unknown_status"`, "Still open"}},
		{"history", history.String(), "Reconciliation history: 8 runs", []string{"refused", "repaired", "line"},
			[]string{`id="history-actions"`, `id="history-miss"`, "<polyline"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := openInChromium(t, bin, c.name, c.page)
			saveScreenshot(t, run, c.name)

			assert.Contains(t, run.dom, "<title>"+c.title+"</title>", "dumped DOM holds the title")
			for _, s := range c.dom {
				assert.Contains(t, run.dom, s)
			}
			assert.NotContains(t, run.dom, "<script")
			assert.Empty(t, consoleProblems(run.stderr, run.url), "console messages for the page")

			b := run.png.Bounds()
			assert.Equal(t, 1280, b.Dx(), "screenshot width")
			assert.Equal(t, 1600, b.Dy(), "screenshot height")
			px := pixels(run.png)
			assert.Greater(t, px.nonWhite, px.total/50, "screenshot is not blank: %d of %d pixels are not white", px.nonWhite, px.total)
			for _, col := range c.colours {
				assert.Greater(t, px.count[col], 300, "the chart's %s colour is visible (%d pixels)", col, px.count[col])
			}
		})
	}
}

// TestChromiumConsoleCheckCatchesErrors shows the console check is not
// vacuous: a report page with a script and an external image added logs
// CSP violations for the page, and a page without CSP that throws logs
// "Uncaught".
func TestChromiumConsoleCheckCatchesErrors(t *testing.T) {
	bin := findChromium(t)
	var report bytes.Buffer
	require.NoError(t, RenderHTML(&report, sample()))
	bad := strings.Replace(report.String(), "<body>",
		`<body><script>console.log("ran")</script><img alt="" src="https://example.invalid/x.png">`, 1)
	run := openInChromium(t, bin, "bad", bad)
	problems := consoleProblems(run.stderr, run.url)
	require.NotEmpty(t, problems, "stderr:\n%s", run.stderr)
	joined := strings.Join(problems, "\n")
	assert.Contains(t, joined, "Content Security Policy")
	assert.NotContains(t, joined, `"ran"`, "the CSP kept the script from running")

	run = openInChromium(t, bin, "throws", `<!DOCTYPE html><title>t</title><p>x</p><script>throw new Error("boom")</script>`)
	problems = consoleProblems(run.stderr, run.url)
	require.NotEmpty(t, problems, "stderr:\n%s", run.stderr)
	assert.Contains(t, strings.Join(problems, "\n"), "Uncaught Error: boom")
}

// layoutBox is one checked element as the browser laid it out.
type layoutBox struct {
	Left, Right, Width, Height float64
	// Clip names the nearest ancestor that scrolls or clips and the box
	// does not fit in; "" when none.
	Clip string
	Text string
}

type layoutResult struct {
	InnerWidth, ClientWidth, ScrollWidth, ScrollHeight int
	Boxes                                              []layoutBox
}

// layoutScript measures the laid-out page: the viewport, the document's
// scroll width and height, and the box of every element matching
// SELECTOR, with the nearest scrolling or clipping ancestor it does not fit
// in.
const layoutScript = `(function () {
  var de = document.documentElement;
  var out = {InnerWidth: innerWidth, ClientWidth: de.clientWidth, ScrollWidth: de.scrollWidth, ScrollHeight: de.scrollHeight, Boxes: []};
  document.querySelectorAll(SELECTOR).forEach(function (el) {
    var r = el.getBoundingClientRect(), clip = "";
    for (var a = el.parentElement; a && a !== de; a = a.parentElement) {
      if (getComputedStyle(a).overflowX === "visible") continue;
      var ar = a.getBoundingClientRect();
      if (r.left < ar.left - 0.5 || r.right > ar.right + 0.5) { clip = a.tagName.toLowerCase() + "." + a.className; break; }
    }
    out.Boxes.push({Left: r.left, Right: r.right, Width: r.width, Height: r.height, Clip: clip, Text: el.textContent.trim().slice(0, 60)});
  });
  return out;
})()`

// measureLayout opens page in a w×h viewport and returns what layoutScript
// measured for selector, and the tab, for a screenshot.
func measureLayout(t *testing.T, b *cdpBrowser, name, page, selector string, w, h int) (layoutResult, *cdpPage) {
	t.Helper()
	file := filepath.Join(t.TempDir(), name+".html")
	require.NoError(t, os.WriteFile(file, []byte(page), 0o644))
	p := b.open(file, w, h)
	var res layoutResult
	p.eval(strings.Replace(layoutScript, "SELECTOR", strconv.Quote(selector), 1), &res)
	return res, p
}

// assertFits checks a page laid out at width w: the viewport is w wide,
// the document does not scroll sideways, and every checked box (at least
// want of them) is visible, inside the viewport horizontally and not cut
// off by a scrolling or clipping ancestor. An empty element the page does
// not show (an empty table cell on a phone) has nothing to fit.
func assertFits(t *testing.T, res layoutResult, w, want int) {
	t.Helper()
	require.Equal(t, w, res.InnerWidth, "viewport width")
	assert.LessOrEqual(t, res.ScrollWidth, res.ClientWidth, "document scrolls horizontally at %d px", w)
	require.GreaterOrEqual(t, len(res.Boxes), want, "checked elements")
	for _, b := range res.Boxes {
		if b.Text == "" && b.Width == 0 && b.Height == 0 {
			continue // an empty cell, not shown
		}
		assert.Greater(t, b.Width, 0.0, "%q has no width", b.Text)
		assert.Greater(t, b.Height, 0.0, "%q has no height", b.Text)
		assert.GreaterOrEqual(t, b.Left, 0.0, "%q starts left of the viewport at %d px", b.Text, w)
		assert.LessOrEqual(t, b.Right, float64(res.ClientWidth), "%q ends right of the viewport at %d px (%.0f)", b.Text, w, b.Right)
		assert.Empty(t, b.Clip, "%q is cut off by its scrolling ancestor at %d px", b.Text, w)
	}
}

// viewports are a laptop and a phone.
var viewports = []struct{ w, h int }{{1280, 800}, {390, 844}}

// TestChromiumLayout checks at 1280 and 390 px that every item's
// explanation lies inside the viewport and is not in a scroll area, and
// that neither page scrolls sideways; for the history page every cell of
// the runs table. Under -update it takes the screenshots of the example
// pages in docs/examples/.
func TestChromiumLayout(t *testing.T) {
	bin := findChromium(t)
	browser := startCDP(t, bin)
	var report, history bytes.Buffer
	rep := layoutSample()
	require.NoError(t, RenderHTML(&report, rep))
	require.NoError(t, RenderHistoryHTML(&history, layoutHistory()))
	runs := layoutHistory()
	pages := []struct {
		name, page, selector string
		want                 int
	}{
		{"report", report.String(), ".expl", len(rep.Runs[0].Items)},
		// The rest of each item: its head, fingerprint and acknowledgement.
		{"report-facts", report.String(), "li.item .item-head, li.item .fp, li.item .ack", len(rep.Runs[0].Items) + int(rep.Runs[0].Refused+rep.Runs[0].Reported) + 2},
		{"history", history.String(), "table.runs td", 10 * len(runs)},
	}
	for _, ex := range []string{"report", "report-followup", "history"} {
		b, err := os.ReadFile(filepath.Join("..", "docs", "examples", ex+".html"))
		if err != nil {
			continue
		}
		sel, want := ".expl", strings.Count(string(b), `class="expl"`)
		if ex == "history" {
			sel, want = "table.runs td", strings.Count(string(b), `<td `)
		}
		require.Positive(t, want, "docs/examples/%s.html has nothing to check: regenerate it (scripts/examples.sh)", ex)
		pages = append(pages, struct {
			name, page, selector string
			want                 int
		}{"example-" + ex, string(b), sel, want})
	}
	for _, p := range pages {
		for _, vp := range viewports {
			t.Run(fmt.Sprintf("%s/%d", p.name, vp.w), func(t *testing.T) {
				res, tab := measureLayout(t, browser, p.name, p.page, p.selector, vp.w, vp.h)
				assertFits(t, res, vp.w, p.want)
				if *update && strings.HasPrefix(p.name, "example-") {
					// The full page, as tall as it is laid out (at most 20000 px).
					path := filepath.Join("..", "docs", "examples", fmt.Sprintf("%s-%d.png", strings.TrimPrefix(p.name, "example-"), vp.w))
					require.NoError(t, os.WriteFile(path, tab.screenshot(vp.w, min(res.ScrollHeight, 20000)), 0o644))
					t.Logf("wrote %s", path)
				}
			})
		}
	}
}

// TestChromiumLayoutCatchesOverflow shows the layout check is not vacuous:
// the report page with its items put back in one wide table (as before
// issue 17: the explanation last, in a horizontal scroll area) fails it at
// 1280 px, and so does a page wider than the viewport.
func TestChromiumLayoutCatchesOverflow(t *testing.T) {
	browser := startCDP(t, findChromium(t))
	old := `<!DOCTYPE html><html><head><style>
body { margin: 0 auto; padding: 1rem; max-width: 72rem; } .table-wrap { overflow-x: auto; } td { white-space: nowrap; } td.expl { white-space: normal; min-width: 16rem; }
</style></head><body><div class="table-wrap"><table><tr>` + strings.Repeat("<td>pi_3QxYzAbCdEfGhIjKlMnOpQrStUvWxYz0123456789 requires_reauthorization</td>", 3) +
		`<td class="expl"><span class="expl">` + strings.Repeat("explanation ", 40) + `</span></td></tr></table></div></body></html>`
	res, _ := measureLayout(t, browser, "old", old, ".expl", 1280, 800)
	require.Len(t, res.Boxes, 2)
	assert.NotEmpty(t, res.Boxes[0].Clip, "the explanation in a scroll area is caught")
	assert.Greater(t, res.Boxes[0].Right, float64(res.ClientWidth), "and lies right of the viewport")

	wide := `<!DOCTYPE html><html><head></head><body>` +
		`<p class="expl" style="width: 2000px">too wide</p></body></html>`
	res, _ = measureLayout(t, browser, "wide", wide, ".expl", 390, 844)
	assert.Greater(t, res.ScrollWidth, res.ClientWidth, "a page wider than the viewport scrolls")
	assert.Greater(t, res.Boxes[0].Right, float64(res.ClientWidth))
}
