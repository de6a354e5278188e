package lifecycle

import "testing"

func TestCount(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0 bytes"},
		{1, "1 byte"},
		{2, "2 bytes"},
		{-1, "-1 bytes"},
		{1234567, "1234567 bytes"},
	} {
		if got := Count(c.n, "byte", "bytes"); got != c.want {
			t.Errorf("Count(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	if got := Count(1, "batch", "batches"); got != "1 batch" {
		t.Errorf("Count(1) of an int = %q, want 1 batch", got)
	}
}
