package commands_test

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/targets"
)

// signed signs body with keys at the clock's time, as a worker does.
func signed(b *bundle, keys []targets.Key, body []byte) http.Header {
	h := http.Header{}
	targets.SignHeaders(h, keys, "msg_1", b.clock.Now(), body)
	return h
}

func TestRotateTargetKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	made, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "signed", Kind: "http", Config: sinkConfig}, admin)
	if err != nil {
		t.Fatal(err)
	}
	first, err := b.w.TargetKeys(b.ctx, "signed")
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.w.RotateTargetKey(b.ctx, "signed", time.Hour, "", admin)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := b.w.TargetKeys(b.ctx, "signed")
	if err != nil || len(keys) != 2 || keys[0].ID != first[0].ID || keys[1].ID != second.ID {
		t.Fatalf("keys after the rotation %+v: %v", keys, err)
	}
	if want := b.clock.Now().Add(time.Hour); !keys[0].ExpiresAt.Equal(want) || !keys[1].ExpiresAt.IsZero() {
		t.Fatalf("ends %v and %v, want %v and none", keys[0].ExpiresAt, keys[1].ExpiresAt, want)
	}
	defs, _ := b.w.Targets(b.ctx)
	if got := defs[0].Signing.Keys; !slices.Equal(got, []string{first[0].ID, second.ID}) {
		t.Fatalf("the definition's keys %v", got)
	}
	if slices.Equal(defs[0].Signing.Keys, made.Signing.Keys) {
		t.Fatal("the definition did not change, so no worker reloads")
	}

	// During the grace both keys sign; after it only the new one.
	body := []byte(`{"order":42}`)
	h := signed(b, keys, body)
	if n := len(strings.Fields(h.Get(targets.HeaderWebhookSignature))); n != 2 {
		t.Fatalf("%d signatures during the grace", n)
	}
	for _, k := range keys {
		if err := targets.Verify(h, body, k, b.clock.Now()); err != nil {
			t.Fatalf("during the grace: %v", err)
		}
	}
	b.clock.Advance(time.Hour)
	h = signed(b, keys, body)
	if n := len(strings.Fields(h.Get(targets.HeaderWebhookSignature))); n != 1 ||
		targets.Verify(h, body, keys[1], b.clock.Now()) != nil || targets.Verify(h, body, keys[0], b.clock.Now()) == nil {
		t.Fatalf("after the grace: %q", h.Get(targets.HeaderWebhookSignature))
	}
	if keys, err = b.w.TargetKeys(b.ctx, "signed"); err != nil || len(keys) != 1 || keys[0].ID != second.ID {
		t.Fatalf("keys after the grace %+v: %v", keys, err)
	}

	// The journal names the keys, never their material.
	events, err := journal.Stream(b.ctx, b.db, journal.ConfigStream)
	if err != nil {
		t.Fatal(err)
	}
	var rotated *journal.TargetKeyRotated
	for _, e := range events {
		if p, ok := e.Payload.(*journal.TargetKeyRotated); ok {
			rotated = p
		}
		if strings.Contains(string(mustEncode(t, e.Payload)), second.SecretText()) {
			t.Fatalf("%s holds a key", e.Kind())
		}
	}
	if rotated == nil || rotated.KeyID != second.ID || rotated.Fingerprint != second.Fingerprint() ||
		len(rotated.Retired) != 1 || rotated.Retired[0].KeyID != first[0].ID {
		t.Fatalf("rotation event %+v", rotated)
	}

	// A key given is taken; grace 0 ends the others at once.
	given := "whsec_" + strings.Repeat("A", 43) + "="
	third, err := b.w.RotateTargetKey(b.ctx, "signed", 0, given, admin)
	if err != nil || third.SecretText() != given {
		t.Fatalf("a key given: %+v, %v", third, err)
	}
	if keys, err = b.w.TargetKeys(b.ctx, "signed"); err != nil || len(keys) != 1 || keys[0].ID != third.ID {
		t.Fatalf("keys after a rotation without grace %+v: %v", keys, err)
	}
	b.audit(t)
}

func mustEncode(t *testing.T, p journal.Payload) []byte {
	t.Helper()
	data, err := journal.Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestRotateTargetKeyRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "signed", Kind: "http", Config: sinkConfig}, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "plain", Kind: "http", Config: sinkConfig,
		Signing: &lifecycle.Signing{Scheme: targets.SchemeNone}}, admin); err != nil {
		t.Fatal(err)
	}
	field := func(err error) string {
		var fe *lifecycle.FieldError
		if !errors.Is(err, commands.ErrInvalid) || !errors.As(err, &fe) {
			return ""
		}
		return fe.Field
	}
	for _, tt := range []struct {
		name, target string
		grace        time.Duration
		key, field   string
	}{
		{"negative grace", "signed", -time.Second, "", "grace"},
		{"grace over 7 days", "signed", commands.MaxKeyGrace + time.Second, "", "grace"},
		{"bad key", "signed", time.Hour, "whsec_short", "key"},
		{"key of another scheme", "signed", time.Hour, "whsk_" + strings.Repeat("A", 43) + "=", "key"},
		{"no scheme", "plain", time.Hour, "", "signing.scheme"},
	} {
		if _, err := b.w.RotateTargetKey(b.ctx, tt.target, tt.grace, tt.key, admin); field(err) != tt.field {
			t.Errorf("%s: %v, want a field error on %s", tt.name, err, tt.field)
		}
	}
	if _, err := b.w.RotateTargetKey(b.ctx, "nobody", time.Hour, "", admin); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("unknown target: %v", err)
	}
	// The grace's bounds themselves are allowed.
	if _, err := b.w.RotateTargetKey(b.ctx, "signed", commands.MaxKeyGrace, "", admin); err != nil {
		t.Fatal(err)
	}
	// At most 10 keys sign at once: 10 are live now, the 11th is refused
	// and changes nothing.
	for range targets.MaxLiveKeys - 2 {
		if _, err := b.w.RotateTargetKey(b.ctx, "signed", time.Hour, "", admin); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := b.w.TargetKeys(b.ctx, "signed")
	if len(before) != targets.MaxLiveKeys {
		t.Fatalf("%d keys live", len(before))
	}
	if _, err := b.w.RotateTargetKey(b.ctx, "signed", time.Hour, "", admin); !errors.Is(err, commands.ErrTooManyKeys) {
		t.Fatalf("an 11th key: %v", err)
	}
	after, _ := b.w.TargetKeys(b.ctx, "signed")
	if len(after) != len(before) {
		t.Fatalf("a refused rotation changed the keys: %d then %d", len(before), len(after))
	}
	// Once the graces end there is room again.
	b.clock.Advance(time.Hour)
	if _, err := b.w.RotateTargetKey(b.ctx, "signed", time.Hour, "", admin); err != nil {
		t.Fatal(err)
	}
	b.audit(t)
}

func TestOwnKeysMadeOnceAndRotated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Processes that start at once on one database make one key.
	writers := make([]*commands.Writer, 4)
	for i := range writers {
		var err error
		if writers[i], err = newWriter(b, nil); err != nil {
			t.Fatal(err)
		}
	}
	got := make([][]targets.Key, len(writers))
	var wg sync.WaitGroup
	for i, w := range writers {
		wg.Go(func() {
			var err error
			if got[i], err = w.OwnKeys(b.ctx, lifecycle.KeyOwnerCallbacks); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, keys := range got {
		if len(keys) != 1 || keys[0].ID != got[0][0].ID || keys[0].Scheme != targets.SchemeHMAC {
			t.Fatalf("keys %+v, want the one key every process found", got)
		}
	}
	events, err := journal.Stream(b.ctx, b.db, journal.ConfigStream)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Kind() != journal.KindSigningKeyAdded {
		t.Fatalf("events %v, want one signing.key_added", events)
	}

	// A rotation is seen by the Writer that made it at once.
	next, err := b.w.RotateOwnKey(b.ctx, lifecycle.KeyOwnerCallbacks, time.Minute, "", admin)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := b.w.OwnKeys(b.ctx, lifecycle.KeyOwnerCallbacks)
	if err != nil || len(keys) != 2 || keys[1].ID != next.ID {
		t.Fatalf("keys after the rotation %+v: %v", keys, err)
	}

	// A change of scheme makes a key of it and ends the others at once;
	// none signs nothing and refuses a rotation.
	s, _ := b.w.Settings(b.ctx)
	s.Callbacks.Signing.Scheme = targets.SchemeEd25519
	if err := b.w.SetSettings(b.ctx, s, admin); err != nil {
		t.Fatal(err)
	}
	if keys, err = b.w.OwnKeys(b.ctx, lifecycle.KeyOwnerCallbacks); err != nil || len(keys) != 1 || keys[0].Scheme != targets.SchemeEd25519 {
		t.Fatalf("keys after the change of scheme %+v: %v", keys, err)
	}
	s.Alerts.Signing.Scheme = targets.SchemeNone
	if err := b.w.SetSettings(b.ctx, s, admin); err != nil {
		t.Fatal(err)
	}
	if keys, err = b.w.OwnKeys(b.ctx, lifecycle.KeyOwnerAlerts); err != nil || len(keys) != 0 {
		t.Fatalf("alerts signed by none: %+v, %v", keys, err)
	}
	var fe *lifecycle.FieldError
	if _, err := b.w.RotateOwnKey(b.ctx, lifecycle.KeyOwnerAlerts, 0, "", admin); !errors.As(err, &fe) || fe.Field != "alerts.signing.scheme" {
		t.Fatalf("a rotation of unsigned alerts: %v", err)
	}
	b.audit(t)
}

// TestAuditHoldsRotationsToTheJournal: a key's end or material changed behind
// the journal's back is a violation.
func TestAuditHoldsRotationsToTheJournal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "signed", Kind: "http", Config: sinkConfig}, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.RotateTargetKey(b.ctx, "signed", time.Hour, "", admin); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.OwnKeys(b.ctx, lifecycle.KeyOwnerAlerts); err != nil {
		t.Fatal(err)
	}
	b.audit(t)
	var fingerprint string
	if err := b.db.QueryRow(b.ctx, `SELECT fingerprint FROM target_keys WHERE target = '@alerts'`).Scan(&fingerprint); err != nil {
		t.Fatal(err)
	}
	for _, tamper := range []struct{ name, sql, undo, want string }{
		{"a longer grace",
			`UPDATE target_keys SET expires_at = expires_at + interval '1 day' WHERE target = 'signed' AND expires_at IS NOT NULL`,
			`UPDATE target_keys SET expires_at = expires_at - interval '1 day' WHERE target = 'signed' AND expires_at IS NOT NULL`,
			"target signed: signing key"},
		{"another key", `UPDATE target_keys SET fingerprint = 'sha256:00' WHERE target = '@alerts'`,
			`UPDATE target_keys SET fingerprint = '` + fingerprint + `' WHERE target = '@alerts'`, "@alerts: signing key"},
	} {
		if _, err := b.db.Exec(b.ctx, tamper.sql); err != nil {
			t.Fatal(err)
		}
		r, err := projection.Audit(b.ctx, b.db, uuid.Nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Violations) != 1 || !strings.Contains(r.Violations[0].Problem, tamper.want) {
			t.Errorf("%s: violations %v", tamper.name, r.Violations)
		}
		if _, err := b.db.Exec(b.ctx, tamper.undo); err != nil {
			t.Fatal(err)
		}
	}
	b.audit(t)
}
