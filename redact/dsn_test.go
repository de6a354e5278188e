package redact_test

import (
	"strings"
	"testing"

	"github.com/waybill/waybill/redact"
)

func TestDSN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dsn, want string }{
		// URLs: the user info's password, the query's password and
		// sslpassword, their names percent-decoded.
		{"postgres://waybill:s3cret@db:5432/inbox?sslmode=disable", "postgres://waybill:***@db:5432/inbox?sslmode=disable"},
		{"postgresql://u:p%40ss@db/x", "postgresql://u:***@db/x"},
		{"postgres://u:p@ss@db/x", "postgres://u:***@db/x"},
		{"postgres://u:one@h1:5432,h2:5433/x", "postgres://u:***@h1:5432,h2:5433/x"},
		{"postgres://u@db/x?password=s3cret&sslmode=require", "postgres://u@db/x?password=***&sslmode=require"},
		{"postgres://u:one@db/x?password=two", "postgres://u:***@db/x?password=***"},
		{"postgres://u@db/x?sslmode=verify-full&sslpassword=k3y", "postgres://u@db/x?sslmode=verify-full&sslpassword=***"},
		{"postgres://u@db/x?pass%77ord=s3cret", "postgres://u@db/x?pass%77ord=***"},
		{"postgres://u@db/x?%73slpassword=k3y#frag", "postgres://u@db/x?%73slpassword=***#frag"},
		{"postgres://u@db/x?%zz=s3cret", "postgres://u@db/x?%zz=***"},
		{"postgres://u@db/x?password=&user=u", "postgres://u@db/x?password=&user=u"},
		{"postgres://u@db/x?mypassword=x&passwords=y", "postgres://u@db/x?mypassword=x&passwords=y"},
		{"postgres://waybill@db/inbox", "postgres://waybill@db/inbox"},
		{"postgres://u:@db/x", "postgres://u:@db/x"},
		{"postgres://db/x?user=u", "postgres://db/x?user=u"},
		// key=value pairs: plain, spaced, quoted with escapes.
		{"host=db user=u password=s3cret dbname=x", "host=db user=u password=*** dbname=x"},
		{"host=db password = 's3 cr\\'et' dbname=x", "host=db password = *** dbname=x"},
		{"host=db password=s3\\ cret dbname=x", "host=db password=*** dbname=x"},
		{"password=s3cret", "password=***"},
		{"host=db sslpassword='k 3y' sslkey=/k.pem", "host=db sslpassword=*** sslkey=/k.pem"},
		{"password= host=db", "password= ***"},
		{"host=db mypassword=x dbname=x", "host=db mypassword=x dbname=x"},
		{"host=db dbname=x", "host=db dbname=x"},
		{"host=db password='unclosed dbname=x", "host=db password=***"},
		{"host=db garbage s3cret", "host=db ***"},
		{"", ""},
	} {
		if got := redact.DSN(tc.dsn); got != tc.want {
			t.Errorf("redact.DSN(%q) = %q, want %q", tc.dsn, got, tc.want)
		}
		if strings.Contains(tc.want, redact.Mask) != redact.HoldsMask(tc.want) {
			t.Errorf("redact.HoldsMask(%q) = %t", tc.want, redact.HoldsMask(tc.want))
		}
	}
}

func TestURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"https://user:s3cret@receiver.example/in", "https://user:***@receiver.example/in"},
		{"https://user:p%2Fw@receiver.example/in?x=1", "https://user:***@receiver.example/in?x=1"},
		{"https://user@receiver.example/in", "https://user@receiver.example/in"},
		{"https://receiver.example:8443/a:b@c", "https://receiver.example:8443/a:b@c"},
		{"http://127.0.0.1:8080/in", "http://127.0.0.1:8080/in"},
		{"not a url", "not a url"},
	} {
		if got := redact.URL(tc.url); got != tc.want {
			t.Errorf("redact.URL(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}
