package lifecycle

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Count is n of a thing in words, for the texts people read (the
// histories, the CLI): "1 message", "0 messages", "2 messages".
func Count[N ~int | ~int64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.FormatInt(int64(n), 10) + " " + many
}

// CutMark ends a text Cut shortened.
const CutMark = "…"

// Cut is s in at most n bytes (n at least len(CutMark)): whole when it
// fits, else its start, ended at a character's boundary, and CutMark. A
// run of bytes that are not UTF-8 becomes "?", so the text is valid UTF-8
// whatever s holds.
func Cut(s string, n int) string {
	if len(s) <= n {
		return strings.ToValidUTF8(s, "?")
	}
	end := n - len(CutMark)
	// A character split at end is left out whole; the bound on the steps
	// keeps bytes that are not UTF-8 from walking back further.
	for back := 0; back < utf8.UTFMax-1 && end > 0 && !utf8.RuneStart(s[end]); back++ {
		end--
	}
	return strings.ToValidUTF8(s[:end], "?") + CutMark
}
