package projection

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

// TestCursorsRoundTripAndStayInTheirList: a cursor reads back as it was
// written, to the microsecond the database keeps; a cursor of the other
// list, or anything else, is a FieldError on cursor.
func TestCursorsRoundTripAndStayInTheirList(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 8, 0, 0, 123456000, time.UTC)
	id := uuid.New()
	m, err := ParseCursor(Cursor{CreatedAt: at, ID: id}.String())
	if err != nil || !m.CreatedAt.Equal(at) || m.ID != id {
		t.Fatalf("messages' cursor: %+v, %v", m, err)
	}
	o, err := ParseOperationCursor(OperationCursor{CreatedAt: at, ID: id}.String())
	if err != nil || !o.CreatedAt.Equal(at) || o.ID != id {
		t.Fatalf("operations' cursor: %+v, %v", o, err)
	}
	var fe *lifecycle.FieldError
	for _, bad := range []string{OperationCursor{CreatedAt: at, ID: id}.String(), "", "not base64!", "bTE6eDp5"} {
		if _, err := ParseCursor(bad); !errors.As(err, &fe) || fe.Field != "cursor" {
			t.Errorf("ParseCursor(%q): %v", bad, err)
		}
	}
	if _, err := ParseOperationCursor(Cursor{CreatedAt: at, ID: id}.String()); !errors.As(err, &fe) {
		t.Errorf("an operations' list took a messages' cursor: %v", err)
	}
}
