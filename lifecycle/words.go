package lifecycle

import "strconv"

// Count is n of a thing in words, for the texts people read (the
// histories, the CLI): "1 message", "0 messages", "2 messages".
func Count[N ~int | ~int64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.FormatInt(int64(n), 10) + " " + many
}
