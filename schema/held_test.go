package schema_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/schema"
)

// TestCheckFindsALostLock: Check passes while the session that took a lock
// or a lease lives, and fails with ErrLockLost, naming it, once that
// session has ended; a lease is not taken again by Check.
func TestCheckFindsALostLock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := dbtest.Pool(t)
	lock, err := schema.LockOnline(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	lease := schema.NewLease(db, schema.KeyRetention, "retention", slog.New(slog.DiscardHandler), nil)
	defer lease.Release()
	if err := lease.Check(ctx); !errors.Is(err, schema.ErrLockLost) || !strings.Contains(err.Error(), "retention lease") {
		t.Fatalf("Check of a lease not taken: %v", err)
	}
	if held, err := lease.Take(ctx); err != nil || !held {
		t.Fatalf("Take: %v %v", held, err)
	}
	if err := lock.Check(ctx); err != nil {
		t.Fatalf("Check of the online rebuild lock held: %v", err)
	}
	if err := lease.Check(ctx); err != nil {
		t.Fatalf("Check of the lease held: %v", err)
	}

	dbtest.TerminateHolder(t, db, schema.KeyRetention)
	err = lease.Check(ctx)
	if !errors.Is(err, schema.ErrLockLost) || !strings.Contains(err.Error(), "the retention lease was lost") {
		t.Fatalf("Check of a lease whose session ended: %v", err)
	}
	// Another process takes it meanwhile; Check still says it was lost.
	other := schema.NewLease(db, schema.KeyRetention, "retention", slog.New(slog.DiscardHandler), nil)
	defer other.Release()
	if held, err := other.Take(ctx); err != nil || !held {
		t.Fatalf("another process's Take: %v %v", held, err)
	}
	if err := lease.Check(ctx); !errors.Is(err, schema.ErrLockLost) {
		t.Fatalf("Check of a lease another process took since: %v", err)
	}
	if err := lock.Check(ctx); err != nil {
		t.Fatalf("Check of the online rebuild lock, still held: %v", err)
	}

	dbtest.TerminateHolder(t, db, schema.KeyOnlineRebuild)
	err = lock.Check(ctx)
	if !errors.Is(err, schema.ErrLockLost) || !strings.Contains(err.Error(), "the online rebuild lock was lost") {
		t.Fatalf("Check of the online rebuild lock whose session ended: %v", err)
	}
	// Lost, it is free: the next online rebuild takes it.
	again, err := schema.LockOnline(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Release()
	if err := again.Check(ctx); err != nil {
		t.Fatal(err)
	}
}
