package httpapi

import (
	"net/http"
	"reflect"

	"github.com/waybill/waybill/projection"
)

// RouteInfo describes one route of the table for the tests.
type RouteInfo struct {
	Method, Path      string
	Request, Response reflect.Type
	Status            int
	Permission        string
	Params            []string
}

// Routes returns the route table.
func Routes() []RouteInfo {
	var out []RouteInfo
	for _, rt := range routes {
		info := RouteInfo{Method: rt.method, Path: rt.path, Status: rt.status,
			Permission: permissionName(permission(rt.pattern())), Params: rt.params}
		if rt.pattern() == webhookPattern {
			info.Permission = "none"
		}
		if rt.request != nil {
			info.Request = reflect.TypeOf(rt.request)
		}
		if rt.response != nil {
			info.Response = reflect.TypeOf(rt.response)
		}
		out = append(out, info)
	}
	return out
}

// Pattern is the pattern the Server's mux serves r with; "" for none.
func (s *Server) Pattern(r *http.Request) string {
	_, p := s.mux.Handler(r)
	return p
}

// DecodeStrict is decodeStrict, for the documented examples.
func DecodeStrict(data []byte, v any) error { return decodeStrict(data, v) }

// Codes are the error codes.
var Codes = []string{CodeSignatureInvalid, CodeCorrelationConsumed, CodeIdempotencyConflict, CodeInvalidField, CodeInvalidStatus, CodeUnauthorized, CodeForbidden, CodeNotFound,
	CodeMethodNotAllowed, CodeAlreadyExists, CodeTargetInUse, CodeTooManyKeys, CodeNotRedispatchable, CodeNotRedeliverable, CodeNotScheduled, CodeNotSkippable, CodeNotResendable, CodePreconditionFailed,
	CodeReceiptRefused, CodePayloadExpunged, CodeNotCancellable, CodeConflict, CodePayloadTooLarge, CodeUnsupportedMediaType, CodeUnavailable, CodeLastAdminToken, CodeInternal}

// PauseRebuilds makes the Server's online rebuilds call pause in each
// phase (projection.OnlineOptions.Pause); set it before starting one.
func (s *Server) PauseRebuilds(pause func(projection.OnlinePhase)) { s.cfg.Rebuilds.pause = pause }
