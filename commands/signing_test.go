package commands_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/schema"
	"github.com/waybill/waybill/targets"
)

// keyEvents returns the target.key_added events of the config stream.
func keyEvents(t *testing.T, b *bundle) []*journal.TargetKeyAdded {
	t.Helper()
	events, err := journal.Stream(b.ctx, b.db, journal.ConfigStream)
	if err != nil {
		t.Fatal(err)
	}
	var out []*journal.TargetKeyAdded
	for _, e := range events {
		if p, ok := e.Payload.(*journal.TargetKeyAdded); ok {
			out = append(out, p)
		}
	}
	return out
}

func TestCreateTargetMakesItsKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	made, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "signed", Kind: "http", Config: sinkConfig}, admin)
	if err != nil {
		t.Fatal(err)
	}
	if made.Signing == nil || made.Signing.Scheme != targets.SchemeHMAC || len(made.Signing.Keys) != 1 {
		t.Fatalf("signing %+v, want hmac-sha256 with one key", made.Signing)
	}
	keys, err := b.w.TargetKeys(b.ctx, "signed")
	if err != nil || len(keys) != 1 || keys[0].ID != made.Signing.Keys[0] || len(keys[0].Secret) != 32 {
		t.Fatalf("keys %+v: %v", keys, err)
	}
	added := keyEvents(t, b)
	if len(added) != 1 || added[0].KeyID != keys[0].ID || added[0].Fingerprint != keys[0].Fingerprint() {
		t.Fatalf("key events %+v", added)
	}
	// No key material anywhere in the journal or the stored definition.
	var journaled string
	if err := b.db.QueryRow(b.ctx, `SELECT string_agg(payload::text, ' ') FROM journal`).Scan(&journaled); err != nil {
		t.Fatal(err)
	}
	var spec string
	if err := b.db.QueryRow(b.ctx, `SELECT spec::text FROM targets WHERE name = 'signed'`).Scan(&spec); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{journaled, spec} {
		if strings.Contains(text, keys[0].SecretText()) || strings.Contains(text, "whsec_") {
			t.Fatalf("a key is stored in the clear: %s", text)
		}
	}

	// A key given is the one that signs; ed25519 and none.
	given := "whsk_" + strings.Repeat("A", 43) + "="
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "ed", Kind: "http", Config: sinkConfig,
		Signing: &lifecycle.Signing{Scheme: targets.SchemeEd25519, Key: given}}, admin); err != nil {
		t.Fatal(err)
	}
	if keys, err := b.w.TargetKeys(b.ctx, "ed"); err != nil || len(keys) != 1 || keys[0].SecretText() != given || keys[0].PublicText() == "" {
		t.Fatalf("ed25519 keys %+v: %v", keys, err)
	}
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "plain", Kind: "http", Config: sinkConfig,
		Signing: &lifecycle.Signing{Scheme: targets.SchemeNone}}, admin); err != nil {
		t.Fatal(err)
	}
	if keys, err := b.w.TargetKeys(b.ctx, "plain"); err != nil || len(keys) != 0 {
		t.Fatalf("an unsigned target's keys %+v: %v", keys, err)
	}
	if _, err := b.w.TargetKeys(b.ctx, "nobody"); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("keys of no target: %v", err)
	}

	// A key goes with its target; one made again under the name gets a
	// new key.
	if err := b.w.DeleteTarget(b.ctx, "signed", admin); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM target_keys WHERE target = 'signed'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d keys left of a deleted target, %v", left, err)
	}
	again, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "signed", Kind: "http", Config: sinkConfig}, admin)
	if err != nil || again.Signing.Keys[0] == made.Signing.Keys[0] {
		t.Fatalf("made again with keys %v (were %v): %v", again.Signing, made.Signing.Keys, err)
	}
	b.audit(t)
}

func TestTargetSigningRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "bad", Kind: "http", Config: sinkConfig,
		Signing: &lifecycle.Signing{Key: "whsec_short"}}, admin)
	var fe *lifecycle.FieldError
	if !errors.Is(err, commands.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "signing.key" {
		t.Fatalf("a bad key: %v", err)
	}
	if targets, _ := b.w.Targets(b.ctx); len(targets) != 0 {
		t.Fatalf("a refused target was made: %+v", targets)
	}
	made, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "signed", Kind: "http", Config: sinkConfig}, admin)
	if err != nil {
		t.Fatal(err)
	}
	// An update that leaves signing out keeps it, keys and all.
	made.Signing = nil
	made.MaxConcurrent = 3
	updated, err := b.w.UpdateTarget(b.ctx, made, admin)
	if err != nil || updated.Signing == nil || updated.Signing.Scheme != targets.SchemeHMAC || len(updated.Signing.Keys) != 1 {
		t.Fatalf("updated %+v: %v", updated.Signing, err)
	}
	for _, s := range []lifecycle.Signing{{Scheme: targets.SchemeEd25519}, {Scheme: targets.SchemeHMAC, Key: "whsec_" + strings.Repeat("A", 44)}} {
		made.Signing = &s
		_, err := b.w.UpdateTarget(b.ctx, made, admin)
		if !errors.Is(err, commands.ErrInvalid) || !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, "signing.") {
			t.Fatalf("update to %+v: %v", s, err)
		}
	}
	b.audit(t)
}

func TestKeysSurviveResetAndRebuild(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "signed")
	before, err := b.w.TargetKeys(b.ctx, "signed")
	if err != nil || len(before) != 1 {
		t.Fatalf("keys %+v: %v", before, err)
	}
	if err := schema.ResetProjections(b.ctx, b.db); err != nil {
		t.Fatal(err)
	}
	// Only a rebuild makes the projections again beside the journal.
	if err := schema.Ensure(b.ctx, b.db); !errors.Is(err, schema.ErrProjectionsReset) {
		t.Fatalf("Ensure after the reset: %v", err)
	}
	if r, err := projection.Rebuild(b.ctx, b.db); err != nil || len(r.Violations) > 0 {
		t.Fatalf("rebuild: %+v, %v", r, err)
	}
	after, err := b.w.TargetKeys(b.ctx, "signed")
	if err != nil || len(after) != 1 || after[0].SecretText() != before[0].SecretText() {
		t.Fatalf("keys after a rebuild %+v: %v", after, err)
	}
	b.audit(t)
}

func TestAuditHoldsKeysToTheJournal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "signed")
	stray := "key_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	if _, err := b.db.Exec(b.ctx, `INSERT INTO target_keys (target, key_id, scheme, secret, fingerprint, created_at)
		VALUES ('signed', $1, 'hmac-sha256', '\x00', 'sha256:00', now())`, stray); err != nil {
		t.Fatal(err)
	}
	r, err := projection.Audit(b.ctx, b.db, uuid.Nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range r.Violations {
		found = found || strings.Contains(v.Problem, stray)
	}
	if !found {
		t.Fatalf("the audit did not report the stray key: %+v", r.Violations)
	}
	// A journaled key that is not stored is reported too.
	if _, err := b.db.Exec(b.ctx, `DELETE FROM target_keys`); err != nil {
		t.Fatal(err)
	}
	if r, err = projection.Audit(b.ctx, b.db, uuid.Nil); err != nil || len(r.Violations) != 1 || !strings.Contains(r.Violations[0].Problem, "not stored") {
		t.Fatalf("audit with the key gone: %+v, %v", r.Violations, err)
	}
}
