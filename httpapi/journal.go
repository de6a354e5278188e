package httpapi

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/waybill/waybill/internal/plainjson"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/redact"
)

// The bounds of a page of the journal.
const (
	defaultJournalLimit = 100
	maxJournalLimit     = 1000
)

// journal pages the whole journal in commit order (journal.ReadCommitted):
// a page never holds an event of a transaction that might still commit, so
// following next_cursor misses none, however late one commits.
func (s *Server) journal(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, err := limitOf(q, defaultJournalLimit, maxJournalLimit)
	var after journal.Mark
	var cursorErr error
	if v := q.Get("cursor"); v != "" {
		after, cursorErr = decodeJournalCursor(v)
	}
	if err := invalid(err, cursorErr); err != nil {
		return err
	}
	events, marks, err := journal.ReadCommitted(r.Context(), s.cfg.DB, after, limit)
	if err != nil {
		return err
	}
	out := JournalPage{Items: make([]JournalEvent, len(events))}
	for i, e := range events {
		payload, err := plainjson.Marshal(payloadForCaller(r, e))
		if err != nil {
			return fmt.Errorf("encode event %d: %w", e.Position, err)
		}
		out.Items[i] = JournalEvent(journal.LineOf(e, payload))
	}
	if len(marks) > 0 {
		after = marks[len(marks)-1]
	}
	out.NextCursor = encodeJournalCursor(after)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// payloadForCaller is e's payload as the request's token may see it: the
// secrets of a target's or a source's definition masked unless the token
// may administer (redact.Payload), as the targets and sources themselves
// are shown.
func payloadForCaller(r *http.Request, e journal.Event) journal.Payload {
	if !redact.Hides(identity(r).Role) {
		return e.Payload
	}
	return redact.Payload(e.Payload)
}

// A journal cursor is the mark of the last event read, as unpadded
// base64url.
func encodeJournalCursor(m journal.Mark) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "j1:%d:%d", m.TxID, m.Position))
}

func decodeJournalCursor(s string) (journal.Mark, error) {
	bad := &lifecycle.FieldError{Field: "cursor", Problem: "is not a cursor of the journal: pass next_cursor as it was given"}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return journal.Mark{}, bad
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 3 || parts[0] != "j1" {
		return journal.Mark{}, bad
	}
	txid, err1 := strconv.ParseUint(parts[1], 10, 64)
	position, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || position < 0 {
		return journal.Mark{}, bad
	}
	return journal.Mark{TxID: txid, Position: position}, nil
}
