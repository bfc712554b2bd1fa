//go:build unix

package report

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A headless Chromium driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: commands on fd 3, answers and events on fd 4,
// each a JSON message ending in NUL). The layout test needs it: a window
// cannot be narrower than 500 px, but the protocol sets the viewport to
// any size (Emulation.setDeviceMetricsOverride), measures the page with
// script the page's CSP does not apply to (Runtime.evaluate), and takes a
// screenshot of the full page.

type cdpMessage struct {
	ID        int64           `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Params    any             `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

type cdpBrowser struct {
	t      *testing.T
	cmd    *exec.Cmd
	out    *os.File
	mu     sync.Mutex
	nextID int64
	wait   map[int64]chan cdpMessage
	events chan cdpMessage
}

// startCDP starts bin headless with the protocol on a pipe; it is stopped
// when the test ends.
func startCDP(t *testing.T, bin string) *cdpBrowser {
	t.Helper()
	dir := t.TempDir()
	toChrome, ours, err := os.Pipe()
	require.NoError(t, err)
	theirs, fromChrome, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic", "--hide-scrollbars",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{toChrome, fromChrome} // fd 3, fd 4
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+filepath.Join(dir, "config"), "XDG_CACHE_HOME="+filepath.Join(dir, "cache"))
	require.NoError(t, cmd.Start())
	toChrome.Close()
	fromChrome.Close()
	b := &cdpBrowser{t: t, cmd: cmd, out: ours, wait: map[int64]chan cdpMessage{}, events: make(chan cdpMessage, 256)}
	t.Cleanup(func() {
		ours.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		theirs.Close()
	})
	go func() {
		r := bufio.NewReader(theirs)
		for {
			line, err := r.ReadBytes(0)
			if err != nil {
				return
			}
			var m cdpMessage
			if json.Unmarshal(line[:len(line)-1], &m) != nil {
				continue
			}
			if m.ID == 0 {
				select {
				case b.events <- m:
				default: // nobody waits for this one
				}
				continue
			}
			b.mu.Lock()
			ch := b.wait[m.ID]
			delete(b.wait, m.ID)
			b.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		}
	}()
	return b
}

// call sends one command and decodes its result into out (nil: ignored).
func (b *cdpBrowser) call(session, method string, params, out any) {
	b.t.Helper()
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan cdpMessage, 1)
	b.wait[id] = ch
	b.mu.Unlock()
	msg, err := json.Marshal(cdpMessage{ID: id, Method: method, SessionID: session, Params: params})
	require.NoError(b.t, err)
	_, err = b.out.Write(append(msg, 0))
	require.NoError(b.t, err, "send %s", method)
	select {
	case m := <-ch:
		if m.Error != nil {
			b.t.Fatalf("%s: %s", method, m.Error.Message)
		}
		if out != nil {
			require.NoError(b.t, json.Unmarshal(m.Result, out), "%s result", method)
		}
	case <-time.After(60 * time.Second):
		b.t.Fatalf("%s: no answer from chromium in 60s", method)
	}
}

// cdpPage is one tab with an emulated viewport.
type cdpPage struct {
	b       *cdpBrowser
	session string
}

// open loads file in a new tab whose viewport is w×h CSS pixels and
// returns once the page has loaded.
func (b *cdpBrowser) open(file string, w, h int) *cdpPage {
	b.t.Helper()
	var target struct {
		TargetID string `json:"targetId"`
	}
	b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	p := &cdpPage{b: b, session: att.SessionID}
	b.call(p.session, "Emulation.setDeviceMetricsOverride", map[string]any{"width": w, "height": h, "deviceScaleFactor": 1, "mobile": false}, nil)
	b.call(p.session, "Page.enable", nil, nil)
	b.call(p.session, "Page.navigate", map[string]any{"url": "file://" + file}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		select {
		case m := <-b.events:
			if m.SessionID == p.session && m.Method == "Page.loadEventFired" {
				return p
			}
		case <-ctx.Done():
			b.t.Fatalf("%s did not load in 60s", file)
		}
	}
}

// eval evaluates a JavaScript expression in the page and decodes its
// value, which must be JSON, into out.
func (p *cdpPage) eval(expr string, out any) {
	p.b.t.Helper()
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	p.b.call(p.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &res)
	if e := res.ExceptionDetails; e != nil {
		p.b.t.Fatalf("evaluate: %s %s", e.Text, e.Exception.Description)
	}
	require.NoError(p.b.t, json.Unmarshal(res.Result.Value, out))
}

// screenshot is a PNG of the page's top w×h CSS pixels, beyond the
// viewport if h is taller.
func (p *cdpPage) screenshot(w, h int) []byte {
	p.b.t.Helper()
	var shot struct {
		Data string `json:"data"`
	}
	p.b.call(p.session, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": 0, "width": w, "height": h, "scale": 1}}, &shot)
	b, err := base64.StdEncoding.DecodeString(shot.Data)
	require.NoError(p.b.t, err)
	return b
}

func (p *cdpPage) String() string { return fmt.Sprintf("page %s", p.session) }
