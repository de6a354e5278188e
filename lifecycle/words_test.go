package lifecycle

import (
	"testing"
	"unicode/utf8"
)

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

func TestCut(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"", 8, ""},
		{"short", 8, "short"},
		{"exactly8", 8, "exactly8"},
		{"nine byte", 8, "nine …"},
		{"ab€€x", 8, "ab€…"},
		{"a€€€", 8, "a€…"}, // € is 3 bytes: the second would be split
		{"abc€€", 8, "abc…"},
		{"a\xff\xfeb", 8, "a?b"},         // not UTF-8, whole
		{"a\xff\xfebcdefgh", 8, "a?bc…"}, // not UTF-8, cut
		{"\x80\x80\x80\x80\x80\x80\x80\x80\x80", 8, "?…"},
	} {
		got := Cut(c.s, c.n)
		if got != c.want || len(got) > c.n || !utf8.ValidString(got) {
			t.Errorf("Cut(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
