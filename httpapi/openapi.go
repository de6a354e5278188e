package httpapi

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the API's OpenAPI 3.1 document.
//
//go:embed openapi.json
var OpenAPI []byte

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(OpenAPI)
	return nil
}
