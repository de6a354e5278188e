package auth_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/auth"
)

func TestSessions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, db := newStore(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	reader, err := s.Create(ctx, "rita", auth.RoleReader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "admin", auth.RoleAdmin); err != nil { // so rita's token may be revoked
		t.Fatal(err)
	}

	secret, started, err := s.StartSession(ctx, reader, now, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := auth.Identity{Name: "rita", Role: auth.RoleReader}
	if started.Identity != want || len(started.CSRF) != 64 || !started.Expires.Equal(now.Add(time.Hour)) {
		t.Fatalf("started %+v", started)
	}
	got, err := s.Session(ctx, secret, now.Add(59*time.Minute))
	if err != nil || got.Identity != want || got.CSRF != started.CSRF {
		t.Fatalf("session before its end: %+v, %v", got, err)
	}
	var stored int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM console_sessions WHERE position($1 in encode(id_sha256, 'hex')) > 0`,
		secret).Scan(&stored); err != nil || stored != 0 {
		t.Fatalf("the table holds the secret: %d rows, %v", stored, err)
	}

	for name, tc := range map[string]struct {
		secret string
		at     time.Time
	}{
		"expired":    {secret, now.Add(time.Hour)},
		"unknown":    {strings.Repeat("ab", 32), now},
		"not hex":    {strings.Repeat("zz", 32), now},
		"too short":  {secret[:10], now},
		"upper case": {strings.ToUpper(secret), now},
	} {
		if _, err := s.Session(ctx, tc.secret, tc.at); !errors.Is(err, auth.ErrUnauthorized) {
			t.Errorf("%s: %v, want ErrUnauthorized", name, err)
		}
	}

	if _, _, err := s.StartSession(ctx, "wb_nonsense", now, now.Add(time.Hour)); !errors.Is(err, auth.ErrUnauthorized) {
		t.Errorf("sign-in with a wrong token: %v, want ErrUnauthorized", err)
	}

	// A later sign-in clears what has expired.
	later := now.Add(2 * time.Hour)
	other, _, err := s.StartSession(ctx, reader, later, later.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM console_sessions`).Scan(&rows); err != nil || rows != 1 {
		t.Errorf("%d session rows after the first expired, want 1 (%v)", rows, err)
	}

	if err := s.EndSession(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(ctx, other, later); !errors.Is(err, auth.ErrUnauthorized) {
		t.Errorf("an ended session: %v, want ErrUnauthorized", err)
	}
	if err := s.EndSession(ctx, other); err != nil {
		t.Errorf("ending it again: %v", err)
	}

	// Revoking the token ends its sessions.
	third, _, err := s.StartSession(ctx, reader, later, later.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// Another process's store, which has read the token before it goes.
	elsewhere := auth.NewStore(db, nil)
	if _, err := elsewhere.Authenticate(ctx, reader); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Revoke(ctx, reader); err != nil {
		t.Fatal(err)
	}
	if _, _, err := elsewhere.StartSession(ctx, reader, later, later.Add(time.Hour)); !errors.Is(err, auth.ErrUnauthorized) {
		t.Errorf("sign-in with a revoked token its store still remembers: %v, want ErrUnauthorized", err)
	}
	if _, err := s.Session(ctx, third, later); !errors.Is(err, auth.ErrUnauthorized) {
		t.Errorf("a session of a revoked token: %v, want ErrUnauthorized", err)
	}
}
