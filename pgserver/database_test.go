package pgserver

import "testing"

// TestCreateDatabaseAndLocalPID: CreateDatabase makes a database once and
// leaves it be the second time; LocalPID, through a connection to it,
// finds the server's postmaster.
func TestCreateDatabaseAndLocalPID(t *testing.T) {
	t.Parallel()
	s := start(t, testDataDir(t))
	for range 2 {
		if err := s.CreateDatabase(t.Context(), "bench-db"); err != nil {
			t.Fatal(err)
		}
	}
	conn := connect(t, s.URL("bench-db"))
	if got := LocalPID(t.Context(), conn); got != s.inst.pid || got == 0 {
		t.Fatalf("LocalPID = %d, want %d", got, s.inst.pid)
	}
}
