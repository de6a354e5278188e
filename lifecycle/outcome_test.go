package lifecycle

import "testing"

func TestErrorCode(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"503 Service Unavailable", "HTTP 503"},
		{"400 Bad Request: account 4711 is closed", "HTTP 400"},
		{"302 Found to http://10.0.0.5/in", "HTTP 302"},
		{"204", "HTTP 204"},
		{"500; retry", "HTTP 500"},
		{`Post "http://admin:***@10.0.0.5:8080/hook?api_key=S": dial tcp 10.0.0.5:8080: connect: connection refused`, "withheld"},
		{"600 Odd", "withheld"},
		{"5034 digits", "withheld"},
		{"50 short", "withheld"},
		{"open /var/out/x.bin: permission denied", "withheld"},
		{"", "withheld"},
	} {
		if got := ErrorCode(tc.text); got != tc.want {
			t.Errorf("ErrorCode(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
}
