package dirlock

import (
	"errors"
	"testing"
)

// TestAcquire: while one lock is held a second Acquire is refused naming
// the owner, and after Release the directory can be owned again.
func TestAcquire(t *testing.T) {
	dir := t.TempDir()
	first, err := Acquire(dir, Owner{PID: 4242, Command: "serve"})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Record(Owner{PID: 4242, Command: "serve", URL: "http://127.0.0.1:8080"}); err != nil {
		t.Fatal(err)
	}

	_, err = Acquire(dir, Owner{PID: 4343, Command: "audit"})
	var held *HeldError
	if !errors.As(err, &held) || held.Owner.PID != 4242 {
		t.Fatalf("second Acquire: %v, want a HeldError naming pid 4242", err)
	}
	if want := "another waybill serve (pid 4242, http://127.0.0.1:8080) uses " + dir; err.Error() != want {
		t.Errorf("refusal %q, want %q", err, want)
	}

	first.Release()
	second, err := Acquire(dir, Owner{PID: 4343, Command: "audit"})
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	second.Release()
}
