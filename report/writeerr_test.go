package report

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

var errFull = errors.New("no space left on device")

// failAfter accepts n bytes, then fails every write, as a full disk does.
type failAfter struct{ n int }

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) <= f.n {
		f.n -= len(p)
		return len(p), nil
	}
	k := f.n
	f.n = 0
	return k, errFull
}

// Every format, of a report and of a history, reports a writer that fails
// at its first byte or part way through: a full disk is never exit 0.
func TestReportEveryFormatReportsWriteErrors(t *testing.T) {
	rep := sample()
	for _, format := range Formats {
		for _, after := range []int{0, 10, 200} {
			require.Error(t, Render(&failAfter{n: after}, rep, format), "Render %s failing after %d bytes", format, after)
			require.Error(t, RenderHistory(&failAfter{n: after}, rep.Runs, format), "RenderHistory %s failing after %d bytes", format, after)
		}
	}
	require.Error(t, RenderText(&failAfter{}, rep, TextOptions{}))
}
