//go:build unix

package report

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
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
		"--screenshot="+shot, "--window-size=1280,1600", "--enable-logging=stderr", "--v=0", "--dump-dom", url)
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
			[]string{"pi_1", "pi_6", "No drift.", `data-kind="unknown_status"`}},
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
