package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/waybill/waybill/commands"
)

// TestNotStoredAnswers: a message that surely was not stored is answered
// as nothing changed; one whose commit may have gone through is not, but
// says the key makes sending it again safe. Both may be tried again.
func TestNotStoredAnswers(t *testing.T) {
	for _, c := range []struct {
		err  error
		says string
	}{
		{fmt.Errorf("%w: %w", errNotStored, errors.New("ingest: write: unexpected EOF")), "nothing was changed"},
		{fmt.Errorf("%w: %w", errNotStored, fmt.Errorf("ingest: %w: write: unexpected EOF", commands.ErrMaybeStored)), "may be stored or not"},
	} {
		f := failureOf(c.err)
		if f.status != http.StatusServiceUnavailable || f.body.Code != CodeUnavailable || !strings.Contains(f.body.Message, c.says) {
			t.Errorf("%v: %d %+v", c.err, f.status, f.body)
		}
	}
}
