package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/plainjson"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/sources"
	"github.com/waybill/waybill/targets"
)

// The codes of the error envelope.
const (
	CodeInvalidField         = "INVALID_FIELD"
	CodeInvalidStatus        = "INVALID_STATUS"
	CodeUnauthorized         = "UNAUTHORIZED"
	CodeSignatureInvalid     = "SIGNATURE_INVALID"
	CodeForbidden            = "FORBIDDEN"
	CodeNotFound             = "NOT_FOUND"
	CodeMethodNotAllowed     = "METHOD_NOT_ALLOWED"
	CodeAlreadyExists        = "ALREADY_EXISTS"
	CodeTargetInUse          = "TARGET_IN_USE"
	CodeTooManyKeys          = "TOO_MANY_KEYS"
	CodeNotRedispatchable    = "NOT_REDISPATCHABLE"
	CodeNotRedeliverable     = "NOT_REDELIVERABLE"
	CodeNotScheduled         = "NOT_SCHEDULED"
	CodeNotSkippable         = "NOT_SKIPPABLE"
	CodeNotResendable        = "NOT_RESENDABLE"
	CodePreconditionFailed   = "PRECONDITION_FAILED"
	CodeReceiptRefused       = "RECEIPT_REFUSED"
	CodePayloadExpunged      = "PAYLOAD_EXPUNGED"
	CodeNotCancellable       = "NOT_CANCELLABLE"
	CodeCorrelationConsumed  = "CORRELATION_CONSUMED"
	CodeIdempotencyConflict  = "IDEMPOTENCY_CONFLICT"
	CodeConflict             = "CONFLICT"
	CodePayloadTooLarge      = "PAYLOAD_TOO_LARGE"
	CodeUnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"
	CodeUnavailable          = "UNAVAILABLE"
	CodeLastAdminToken       = "LAST_ADMIN_TOKEN"
	CodeInternal             = "INTERNAL"
)

// ErrorResponse is the body of every error answer.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody says what went wrong: Code is for programs, Message for people,
// Details for both (which keys it holds depends on the code; see
// ErrorDetails).
type ErrorBody struct {
	Code    string       `json:"code"`
	Message string       `json:"message"`
	Details ErrorDetails `json:"details"`
}

// ErrorDetails are the particulars of an error; each code fills the keys
// that apply to it and leaves the others out.
type ErrorDetails struct {
	// Field is the input that is wrong (INVALID_FIELD, INVALID_STATUS),
	// Problem what is wrong with it and what is allowed.
	Field   string `json:"field,omitempty"`
	Problem string `json:"problem,omitempty"`
	// Errors lists every wrong field when there are several (INVALID_FIELD).
	Errors []FieldProblem `json:"errors,omitempty"`
	// Value is what was given (INVALID_STATUS, UNSUPPORTED_MEDIA_TYPE,
	// ALREADY_EXISTS).
	Value string `json:"value,omitempty"`
	// Stage or State is what the message or delivery is in (the 409s;
	// the message's status for NOT_SCHEDULED).
	Stage string `json:"stage,omitempty"`
	State string `json:"state,omitempty"`
	// Allowed lists what would have been accepted: statuses, stages,
	// states, media types or methods.
	Allowed []string `json:"allowed,omitempty"`
	// Limit is the body limit in bytes (PAYLOAD_TOO_LARGE), or the keys
	// that may sign at once (TOO_MANY_KEYS).
	Limit int64 `json:"limit,omitempty"`
	// Reason says why a message cannot be sent again (NOT_RESENDABLE), why
	// a receipt was refused (RECEIPT_REFUSED: an earlier hand-over's id
	// among the reasons), or why a token may not make the request
	// (FORBIDDEN: its scope, or the kind of source Waybill polls under the
	// name posted to).
	Reason string `json:"reason,omitempty"`
	// Version is the message's current version (PRECONDITION_FAILED).
	Version int `json:"version,omitempty"`
	// Role is the token's role and Needs the permission the route needs
	// (FORBIDDEN).
	Role  string `json:"role,omitempty"`
	Needs string `json:"needs,omitempty"`
	// Fields are the fields in which a message differs from the one that
	// holds its idempotency key (IDEMPOTENCY_CONFLICT).
	Fields []string `json:"fields,omitempty"`
}

// FieldProblem is one wrong field.
type FieldProblem struct {
	Field   string `json:"field"`
	Problem string `json:"problem"`
}

// The errors the API raises itself, beside the commands' own.
var (
	// errNotStored: a message could not be stored; nothing of it was
	// written or routed, and the client may send it again.
	errNotStored = errors.New("the message was not stored")
)

// statusError is a status filter outside the canonical set.
type statusError struct{ value string }

func (e *statusError) Error() string {
	return fmt.Sprintf("status %q is not a message status: allowed are %s", e.value,
		strings.Join(lifecycle.Strings(lifecycle.MessageStatuses), ", "))
}

// forbiddenError is a token whose role, or scope, does not allow the
// request; reason says why when the role alone is not the cause.
type forbiddenError struct {
	role   auth.Role
	needs  auth.Permission
	reason string
}

func (e *forbiddenError) Error() string {
	if e.reason != "" {
		return fmt.Sprintf("a token of role %s may not %s here: %s", e.role, permissionName(e.needs), e.reason)
	}
	return fmt.Sprintf("a token of role %s may not %s", e.role, permissionName(e.needs))
}

// outOfScope refuses the request of a scoped token for reason.
func outOfScope(r *http.Request, needs auth.Permission, reason string) error {
	return &forbiddenError{role: identity(r).Role, needs: needs, reason: reason}
}

func permissionName(p auth.Permission) string {
	switch p {
	case auth.Read:
		return "read"
	case auth.Ingest:
		return "ingest"
	case auth.Confirm:
		return "confirm"
	}
	return "administer"
}

// mediaTypeError is a body sent as something other than JSON.
type mediaTypeError struct{ got string }

func (e *mediaTypeError) Error() string {
	return fmt.Sprintf("the body must be sent as Content-Type: application/json, not %q", e.got)
}

// methodError is a path served for other methods only.
type methodError struct{ allow []string }

func (e *methodError) Error() string {
	return "this path is served for " + strings.Join(e.allow, ", ")
}

// invalid makes field errors an ErrInvalid, as the commands return them.
func invalid(errs ...error) error {
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", commands.ErrInvalid, err)
	}
	return nil
}

// fieldError is one invalid field.
func fieldError(field, problem string) error {
	return invalid(&lifecycle.FieldError{Field: field, Problem: problem})
}

// Refusal is how the API answers err: the status and the envelope's body.
// The console shows a refused action with the same words.
func Refusal(err error) (status int, body ErrorBody) {
	f := failureOf(err)
	return f.status, f.body
}

// Forbidden is the refusal of a request that needs what role does not
// allow: 403 FORBIDDEN, with the role and the permission named.
func Forbidden(role auth.Role, needs auth.Permission) error {
	return &forbiddenError{role: role, needs: needs}
}

// failure is how an error is answered.
type failure struct {
	status int
	body   ErrorBody
}

// failureOf is the one mapping from errors to answers.
func failureOf(err error) failure {
	var (
		tooLarge *http.MaxBytesError
		media    *mediaTypeError
		forbid   *forbiddenError
		method   *methodError
		status   *statusError
		state    *commands.StateError
		stale    *commands.StaleError
		exists   *commands.ExistsError
		conflict *commands.IdempotencyConflictError
	)
	f := func(code int, c string, details ErrorDetails) failure {
		return failure{status: code, body: ErrorBody{Code: c, Message: err.Error(), Details: details}}
	}
	switch {
	case errors.As(err, &tooLarge):
		return f(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, ErrorDetails{Limit: tooLarge.Limit})
	case errors.As(err, &media):
		return f(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType,
			ErrorDetails{Value: media.got, Allowed: []string{"application/json"}})
	case errors.Is(err, auth.ErrUnauthorized):
		return f(http.StatusUnauthorized, CodeUnauthorized, ErrorDetails{})
	case errors.Is(err, sources.ErrUnverified):
		// Why it failed would help a forger: the log has it.
		return failure{status: http.StatusUnauthorized, body: ErrorBody{Code: CodeSignatureInvalid,
			Message: sources.ErrUnverified.Error()}}
	case errors.As(err, &forbid):
		return f(http.StatusForbidden, CodeForbidden, ErrorDetails{Role: string(forbid.role), Needs: permissionName(forbid.needs),
			Reason: forbid.reason})
	case errors.As(err, &method):
		return f(http.StatusMethodNotAllowed, CodeMethodNotAllowed, ErrorDetails{Allowed: method.allow})
	case errors.As(err, &status):
		return f(http.StatusBadRequest, CodeInvalidStatus, ErrorDetails{Field: "status", Value: status.value,
			Allowed: lifecycle.Strings(lifecycle.MessageStatuses)})
	case errors.Is(err, commands.ErrInvalid), errors.Is(err, commands.ErrInvalidTarget):
		return invalidFields(err)
	case errors.Is(err, commands.ErrNotFound), errors.Is(err, auth.ErrNoToken):
		return f(http.StatusNotFound, CodeNotFound, ErrorDetails{})
	case errors.As(err, &stale):
		return f(http.StatusPreconditionFailed, CodePreconditionFailed, ErrorDetails{Version: stale.Current})
	case errors.As(err, &state):
		switch state.Err {
		case commands.ErrNotRedispatchable:
			return f(http.StatusConflict, CodeNotRedispatchable, ErrorDetails{Stage: state.State, Allowed: state.Allowed})
		case commands.ErrNotScheduled:
			return f(http.StatusConflict, CodeNotScheduled, ErrorDetails{State: state.State, Allowed: state.Allowed})
		case commands.ErrNotRedeliverable:
			return f(http.StatusConflict, CodeNotRedeliverable, ErrorDetails{State: state.State, Allowed: state.Allowed})
		case commands.ErrNotSkippable:
			return f(http.StatusConflict, CodeNotSkippable, ErrorDetails{State: state.State, Allowed: state.Allowed})
		case commands.ErrNotResendable:
			return f(http.StatusConflict, CodeNotResendable, ErrorDetails{State: state.State, Allowed: state.Allowed,
				Reason: state.Reason})
		case commands.ErrReceiptRefused:
			return f(http.StatusConflict, CodeReceiptRefused, ErrorDetails{State: state.State, Allowed: state.Allowed,
				Reason: state.Reason})
		case commands.ErrPayloadExpunged:
			// Gone, as the payload's own resource answers: the action
			// needs what is no longer there.
			return f(http.StatusGone, CodePayloadExpunged, ErrorDetails{State: state.State})
		case commands.ErrNotCancellable:
			return f(http.StatusConflict, CodeNotCancellable, ErrorDetails{State: state.State, Allowed: state.Allowed})
		}
		return f(http.StatusConflict, CodeConflict, ErrorDetails{State: state.State, Allowed: state.Allowed})
	case errors.Is(err, commands.ErrPayloadExpunged):
		return f(http.StatusGone, CodePayloadExpunged, ErrorDetails{})
	case errors.Is(err, commands.ErrCorrelationConsumed):
		return f(http.StatusConflict, CodeCorrelationConsumed, ErrorDetails{})
	case errors.As(err, &conflict):
		return f(http.StatusConflict, CodeIdempotencyConflict, ErrorDetails{Fields: conflict.Fields})
	case errors.As(err, &exists):
		return f(http.StatusConflict, CodeAlreadyExists, ErrorDetails{Field: exists.Field, Value: exists.Value})
	case errors.Is(err, auth.ErrLastAdmin):
		return f(http.StatusConflict, CodeLastAdminToken, ErrorDetails{})
	case errors.Is(err, commands.ErrTargetInUse):
		return f(http.StatusConflict, CodeTargetInUse, ErrorDetails{})
	case errors.Is(err, commands.ErrTooManyKeys):
		return f(http.StatusConflict, CodeTooManyKeys, ErrorDetails{Limit: targets.MaxLiveKeys})
	case commands.ProjectionsMoved(err):
		return failure{status: http.StatusServiceUnavailable, body: ErrorBody{Code: CodeUnavailable,
			Message: ProjectionsMovedMessage}}
	case errors.Is(err, commands.ErrMaybeStored):
		return failure{status: http.StatusServiceUnavailable, body: ErrorBody{Code: CodeUnavailable,
			Message: "the service lost its database while it stored the message, which may be stored or not; " +
				"sent again with the same idempotency_key, it is stored once"}}
	case errors.Is(err, errNotStored) || unavailable(err):
		// The cause is ours and may name internals: the log has it.
		return failure{status: http.StatusServiceUnavailable, body: ErrorBody{Code: CodeUnavailable,
			Message: "the service cannot reach its database now; nothing was changed, try again"}}
	}
	return failure{status: http.StatusInternalServerError, body: ErrorBody{Code: CodeInternal,
		Message: "internal error; the server's log has the cause"}}
}

// invalidFields answers validation errors: every *lifecycle.FieldError in
// err, the first also in the details' field and problem.
func invalidFields(err error) failure {
	var problems []FieldProblem
	for _, fe := range fieldErrors(err) {
		problems = append(problems, FieldProblem{Field: fe.Field, Problem: fe.Problem})
	}
	if len(problems) == 0 {
		problems = []FieldProblem{{Field: "body", Problem: err.Error()}}
	}
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.Field + ": " + p.Problem
	}
	d := ErrorDetails{Field: problems[0].Field, Problem: problems[0].Problem}
	if len(problems) > 1 {
		d.Errors = problems
	}
	return failure{status: http.StatusBadRequest,
		body: ErrorBody{Code: CodeInvalidField, Message: strings.Join(msgs, "; "), Details: d}}
}

// fieldErrors collects the field errors in err's tree, in order, once each.
func fieldErrors(err error) []*lifecycle.FieldError {
	var out []*lifecycle.FieldError
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *lifecycle.FieldError:
			if !slices.ContainsFunc(out, func(o *lifecycle.FieldError) bool { return *o == *e }) {
				out = append(out, e)
			}
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}

// unavailable reports a failure to reach the database, or a request that
// ended (the client went away or its time ran out): nothing was done and
// the same request may succeed later.
func unavailable(err error) bool {
	var (
		pgErr   *pgconn.PgError
		connErr *pgconn.ConnectError
		netErr  net.Error
	)
	if errors.As(err, &pgErr) {
		// 08: connection exception; 53: insufficient resources; 57P:
		// operator intervention (shutdown, crash recovery).
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "53") || strings.HasPrefix(pgErr.Code, "57P")
	}
	return errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// ProjectionsMovedMessage is the answer of a server whose build's
// projections are no longer the database's: an online rebuild of a newer
// build switched them, and this server writes nothing more.
const ProjectionsMovedMessage = "the database's projections are now another build's (an online rebuild switched them): this server writes nothing more; nothing was changed, send it to a server of the new build"

// fail answers err with the envelope; causes on our side are logged.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	f := failureOf(err)
	if f.status >= 500 {
		attrs := append([]any{"method", r.Method, "path", r.URL.Path, "status", f.status, "err", err}, subjects(r)...)
		if r.Context().Err() != nil {
			s.log.Debug("http request ended early", attrs...)
		} else {
			s.log.Error("http request failed", attrs...)
		}
	}
	if f.body.Code == CodeUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="waybill"`)
	}
	if f.status == http.StatusServiceUnavailable {
		// Nothing was changed, or a message sent again with its key is
		// stored once: the client may try again at once, and a load
		// balancer may send it to another server.
		w.Header().Set("Retry-After", "1")
	}
	var method *methodError
	if errors.As(err, &method) {
		w.Header().Set("Allow", strings.Join(method.allow, ", "))
	}
	writeJSON(w, f.status, ErrorResponse{Error: f.body})
}

// subjects are the log attributes of what the request is about: the
// message, delivery, route or target its path names.
func subjects(r *http.Request) []any {
	var attrs []any
	if id := r.PathValue("id"); id != "" {
		switch {
		case strings.HasPrefix(r.Pattern, "POST "+Prefix+"/deliveries/"):
			attrs = append(attrs, "delivery_id", id)
		case strings.Contains(r.Pattern, Prefix+"/routes/"):
			attrs = append(attrs, "route_id", id)
		case strings.Contains(r.Pattern, Prefix+"/operations/"):
			attrs = append(attrs, "operation_id", id)
		default:
			attrs = append(attrs, "message_id", id)
		}
	}
	if id := r.PathValue("delivery_id"); id != "" {
		attrs = append(attrs, "delivery_id", id)
	}
	if name := r.PathValue("name"); name != "" {
		key := "target"
		switch {
		case strings.Contains(r.Pattern, " "+Prefix+"/sources/"):
			key = "source"
		case strings.Contains(r.Pattern, " "+Prefix+"/tokens/"):
			key = "token"
		}
		attrs = append(attrs, key, name)
	}
	return attrs
}

// writeJSON answers v as JSON with the status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := plainjson.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		data = []byte(`{"error":{"code":"INTERNAL","message":"internal error: the answer could not be encoded","details":{}}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}
