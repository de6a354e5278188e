package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestAuthenticatedTakesATokenThatReads: what is served beside the API
// (the metrics, which name every source and target) answers an unscoped
// token that may read, and nothing else: not a token that may only post
// messages or receipts, nor a scoped one.
func TestAuthenticatedTakesATokenThatReads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := httptest.NewServer(b.api.Authenticated(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("metrics"))
	})))
	t.Cleanup(srv.Close)
	for token, want := range map[string]int{"": http.StatusUnauthorized, "not-a-token": http.StatusUnauthorized,
		adminToken: http.StatusOK, readerToken: http.StatusOK, ingestToken: http.StatusForbidden, receiptToken: http.StatusForbidden,
		scopedReaderToken: http.StatusForbidden, scopedIngestToken: http.StatusForbidden} {
		req, err := http.NewRequestWithContext(b.ctx, http.MethodGet, srv.URL+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || want == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("token %q: %s, want %d", token, resp.Status, want)
		}
	}
}
