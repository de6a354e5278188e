package redact

import (
	"net/url"
	"slices"
	"strings"
)

// The keys of a PostgreSQL connection string whose values are secret, as
// pgx reads them: the password, and the password of the client's TLS key.
var secretKeys = []string{"password", "sslpassword"}

// DSN is the PostgreSQL connection string with each of its passwords
// written as Mask, so that where it connects may be shown. It reads both
// forms pgx takes: a postgres:// or postgresql:// URL (the password of its
// user info; the password and sslpassword of its query, their names
// percent-decoded) and key=value pairs (values plain or quoted, with
// backslash escapes). What cannot be read to its end, such as an unclosed
// quote, is masked to the end.
func DSN(dsn string) string { return replace(dsn, dsnSpans(dsn), Mask) }

// HoldsMask reports whether a password of the connection string is Mask:
// one copied from what was shown, not the real one.
func HoldsMask(dsn string) bool {
	return slices.ContainsFunc(dsnSpans(dsn), func(s span) bool { return dsn[s.from:s.to] == Mask })
}

// URL is the URL u with the password of its user info written as Mask;
// the rest is left as written.
func URL(u string) string {
	s, ok := userPassword(u)
	if !ok {
		return u
	}
	return replace(u, []span{s}, Mask)
}

// span is where a secret is in a string: [from, to).
type span struct{ from, to int }

// replace is s with each span, in order, written as with.
func replace(s string, spans []span, with string) string {
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		b.WriteString(s[last:sp.from])
		b.WriteString(with)
		last = sp.to
	}
	b.WriteString(s[last:])
	return b.String()
}

// dsnSpans are the passwords of a connection string, in order.
func dsnSpans(dsn string) []span {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return keyValueSpans(dsn)
	}
	var spans []span
	if s, ok := userPassword(dsn); ok {
		spans = append(spans, s)
	}
	q := strings.IndexByte(dsn, '?')
	if q < 0 {
		return spans
	}
	end := len(dsn)
	if h := strings.IndexByte(dsn[q:], '#'); h >= 0 {
		end = q + h
	}
	for from := q + 1; from <= end; {
		to := from + strings.IndexByte(dsn[from:end]+"&", '&')
		key, value, found := strings.Cut(dsn[from:to], "=")
		name, err := url.QueryUnescape(key)
		if found && value != "" && (err != nil || slices.Contains(secretKeys, name)) {
			spans = append(spans, span{to - len(value), to})
		}
		from = to + 1
	}
	return spans
}

// userPassword is where the password of a URL's user info is, as Go's
// url.Parse, which pgx uses, reads it: the authority ends at the first
// '/', '?' or '#', the user info at its last '@', so a password holding
// an unescaped '@' is found whole.
func userPassword(u string) (span, bool) {
	scheme := strings.Index(u, "://")
	if scheme < 0 {
		return span{}, false
	}
	start := scheme + len("://")
	authority := u[start:]
	if i := strings.IndexAny(authority, "/?#"); i >= 0 {
		authority = authority[:i]
	}
	at := strings.LastIndexByte(authority, '@')
	if at < 0 {
		return span{}, false
	}
	colon := strings.IndexByte(authority[:at], ':')
	if colon < 0 || colon+1 == at {
		return span{}, false
	}
	return span{start + colon + 1, start + at}, true
}

// keyValueSpans are the secret values of a key=value connection string,
// read as libpq and pgx read it: pairs apart by spaces, a key, '=' with
// spaces around it or not, a value plain up to a space or quoted in ',
// a backslash escaping the next character in either.
func keyValueSpans(dsn string) []span {
	var spans []span
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' }
	i, n := 0, len(dsn)
	for {
		for i < n && isSpace(dsn[i]) {
			i++
		}
		if i == n {
			return spans
		}
		k := i
		for i < n && dsn[i] != '=' && !isSpace(dsn[i]) {
			i++
		}
		key := dsn[k:i]
		for i < n && isSpace(dsn[i]) {
			i++
		}
		if i == n || dsn[i] != '=' {
			// Not a pair: what follows cannot be read, and may be a
			// secret.
			return append(spans, span{k, n})
		}
		i++
		for i < n && isSpace(dsn[i]) {
			i++
		}
		v := i
		quoted := i < n && dsn[i] == '\''
		if quoted {
			i++
		}
		closed := !quoted
		for i < n {
			c := dsn[i]
			if c == '\\' {
				i += 2
				continue
			}
			if quoted && c == '\'' {
				i++
				closed = true
				break
			}
			if !quoted && isSpace(c) {
				break
			}
			i++
		}
		i = min(i, n)
		switch {
		case !closed:
			return append(spans, span{v, n})
		case slices.Contains(secretKeys, key) && i > v:
			spans = append(spans, span{v, i})
		}
	}
}
