package targets

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/waybill/waybill/lifecycle"
)

func fileConfigFor(dir, more string) string {
	return fmt.Sprintf(`{"dir":%q%s}`, dir, more)
}

// listing is the names in dir, temporary files included.
func listing(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestFileWritesOneFilePerDelivery(t *testing.T) {
	dir := t.TempDir()
	a := attempt(1, "<order/>")
	out := prepare(t, "file", fileConfigFor(dir, `,"extension":"xml"`)).Deliver(t.Context(), a)
	name := a.MessageID.String() + "-2.xml"
	if out.Kind != lifecycle.OutcomeDelivered || !strings.Contains(out.Text, name) {
		t.Fatalf("outcome %+v", out)
	}
	if got := listing(t, dir); !slices.Equal(got, []string{name}) {
		t.Errorf("dir holds %v, want only %s", got, name)
	}
	if data, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(data) != "<order/>" {
		t.Errorf("file holds %q, %v", data, err)
	}

	// The default extension, and the file mode of any file a program
	// writes (0666 less the umask), so that readers of other users can read.
	out = prepare(t, "file", fileConfigFor(dir, "")).Deliver(t.Context(), attempt(1, ""))
	if out.Kind != lifecycle.OutcomeDelivered {
		t.Fatalf("outcome %+v", out)
	}
	written, err := os.Stat(filepath.Join(dir, a.MessageID.String()+"-2.bin"))
	if err != nil || written.Size() != 0 {
		t.Fatalf("empty payload: %v %v", written, err)
	}
	reference := filepath.Join(t.TempDir(), "reference")
	if err := os.WriteFile(reference, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if want, _ := os.Stat(reference); written.Mode() != want.Mode() {
		t.Errorf("mode %v, want %v", written.Mode(), want.Mode())
	}
}

func TestFileIsIdempotent(t *testing.T) {
	dir := t.TempDir()
	d := prepare(t, "file", fileConfigFor(dir, ""))
	first := d.Deliver(t.Context(), attempt(1, "payload"))
	name := filepath.Join(dir, attempt(1, "").MessageID.String()+"-2.bin")
	before, err := os.Stat(name)
	if first.Kind != lifecycle.OutcomeDelivered || err != nil {
		t.Fatalf("first: %+v %v", first, err)
	}

	// A second attempt (its outcome was lost) and a redelivery find their
	// bytes already there.
	again := attempt(2, "payload")
	redelivered := attempt(1, "payload")
	redelivered.Redelivered = true
	for _, a := range []Attempt{again, redelivered} {
		out := d.Deliver(t.Context(), a)
		if out.Kind != lifecycle.OutcomeDelivered || !strings.HasPrefix(out.Text, "already written") {
			t.Errorf("attempt %d (redelivered %v): %+v", a.Number, a.Redelivered, out)
		}
	}
	after, err := os.Stat(name)
	if err != nil || !os.SameFile(before, after) {
		t.Errorf("the file was written again: %v", err)
	}
	if got := listing(t, dir); len(got) != 1 {
		t.Errorf("dir holds %v", got)
	}
}

func TestFileNameTakenByOtherContent(t *testing.T) {
	for _, other := range []string{"another payload", "PAYLOAD", ""} { // longer, same size, shorter
		t.Run(fmt.Sprintf("%q", other), func(t *testing.T) {
			dir := t.TempDir()
			name := filepath.Join(dir, attempt(1, "").MessageID.String()+"-2.bin")
			if err := os.WriteFile(name, []byte(other), 0o644); err != nil {
				t.Fatal(err)
			}
			out := prepare(t, "file", fileConfigFor(dir, "")).Deliver(t.Context(), attempt(1, "payload"))
			if out.Kind != lifecycle.OutcomeFailed || !strings.Contains(out.Text, "overwrite is off") {
				t.Errorf("overwrite off: %+v", out)
			}
			if data, _ := os.ReadFile(name); string(data) != other {
				t.Errorf("the file was changed to %q", data)
			}

			out = prepare(t, "file", fileConfigFor(dir, `,"overwrite":true`)).Deliver(t.Context(), attempt(1, "payload"))
			if out.Kind != lifecycle.OutcomeDelivered {
				t.Errorf("overwrite on: %+v", out)
			}
			if data, _ := os.ReadFile(name); string(data) != "payload" {
				t.Errorf("the file holds %q", data)
			}
			if got := listing(t, dir); len(got) != 1 {
				t.Errorf("dir holds %v", got)
			}
		})
	}
}

func TestFileNameTakenByADirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, attempt(1, "").MessageID.String()+"-2.bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out := prepare(t, "file", fileConfigFor(dir, "")).Deliver(t.Context(), attempt(1, "p")); out.Kind != lifecycle.OutcomeFailed {
		t.Errorf("overwrite off: %+v", out)
	}
	if out := prepare(t, "file", fileConfigFor(dir, `,"overwrite":true`)).Deliver(t.Context(), attempt(1, "p")); out.Kind != lifecycle.OutcomeRetry {
		t.Errorf("overwrite on: %+v", out)
	}
	if got := listing(t, dir); len(got) != 1 {
		t.Errorf("a temporary file was left: %v", got)
	}
}

func TestFileUnwritableDirIsARetry(t *testing.T) {
	parent := t.TempDir()
	notADir := filepath.Join(parent, "plain")
	if err := os.WriteFile(notADir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	readOnly := filepath.Join(parent, "read-only")
	if err := os.Mkdir(readOnly, 0o555); err != nil {
		t.Fatal(err)
	}
	dirs := map[string]string{"missing": filepath.Join(parent, "missing"), "a file": notADir}
	if os.Geteuid() != 0 { // root writes anyway
		dirs["read-only"] = readOnly
	}
	for what, dir := range dirs {
		out := prepare(t, "file", fileConfigFor(dir, "")).Deliver(t.Context(), attempt(1, "p"))
		if out.Kind != lifecycle.OutcomeRetry || !out.RetryAt.IsZero() || !strings.Contains(out.Text, dir) {
			t.Errorf("%s: %+v", what, out)
		}
	}
	if got := listing(t, parent); !slices.Equal(got, []string{"plain", "read-only"}) {
		t.Errorf("parent holds %v", got)
	}
	if got := listing(t, readOnly); len(got) != 0 {
		t.Errorf("read-only holds %v", got)
	}
}

func TestFileCancelledAttemptWritesNothing(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	out := prepare(t, "file", fileConfigFor(dir, "")).Deliver(ctx, attempt(1, "p"))
	if out.Kind != lifecycle.OutcomeRetry || !strings.Contains(out.Text, "canceled") {
		t.Errorf("outcome %+v", out)
	}
	if got := listing(t, dir); len(got) != 0 {
		t.Errorf("dir holds %v", got)
	}
}

// A reader watching the directory sees no file or the whole payload, never
// a part of it, and never the temporary file under the final name.
func TestFileReaderNeverSeesHalfAFile(t *testing.T) {
	dir := t.TempDir()
	d := prepare(t, "file", fileConfigFor(dir, ""))
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	const deliveries = 4
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		for seq := 1; seq <= deliveries; seq++ {
			a := attempt(1, string(payload))
			a.Seq = seq
			if out := d.Deliver(t.Context(), a); out.Kind != lifecycle.OutcomeDelivered {
				t.Errorf("seq %d: %+v", seq, out)
			}
		}
	})
	for watching := true; watching; {
		select {
		case <-done:
			watching = false
		default:
		}
		matches, _ := filepath.Glob(filepath.Join(dir, "*.bin"))
		for _, name := range matches {
			if data, err := os.ReadFile(name); err == nil && !bytes.Equal(data, payload) {
				t.Fatalf("%s seen with %d of %d bytes", name, len(data), len(payload))
			}
		}
	}
	wg.Wait()
	if got := listing(t, dir); len(got) != deliveries {
		t.Errorf("dir holds %v", got)
	}
}

func TestFileConcurrentDeliveries(t *testing.T) {
	dir := t.TempDir()
	d := prepare(t, "file", fileConfigFor(dir, ""))
	var wg sync.WaitGroup
	for seq := 1; seq <= 10; seq++ {
		for range 2 { // two attempts at each delivery at once: both end delivered
			wg.Go(func() {
				a := attempt(1, fmt.Sprintf("payload %d", seq))
				a.Seq = seq
				if out := d.Deliver(t.Context(), a); out.Kind != lifecycle.OutcomeDelivered {
					t.Errorf("seq %d: %+v", seq, out)
				}
			})
		}
	}
	wg.Wait()
	got := listing(t, dir)
	if len(got) != 10 {
		t.Fatalf("dir holds %v", got)
	}
	for seq := 1; seq <= 10; seq++ {
		name := filepath.Join(dir, fmt.Sprintf("%s-%d.bin", attempt(1, "").MessageID, seq))
		if data, err := os.ReadFile(name); err != nil || string(data) != fmt.Sprintf("payload %d", seq) {
			t.Errorf("seq %d: %q %v", seq, data, err)
		}
	}
}
