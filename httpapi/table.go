package httpapi

import (
	"net/http"

	"github.com/waybill/waybill/lifecycle"
)

// route is one operation of the API. The OpenAPI document describes each
// with the same method, path, body types and success status; a test holds
// the two together.
type route struct {
	method string
	// path is below Prefix, in ServeMux's pattern syntax.
	path   string
	handle func(*Server, http.ResponseWriter, *http.Request) error
	// request is the body's type (a zero value), nil when it takes none.
	request any
	// response is the success body's type, nil when it is not JSON.
	response any
	// status is the success status.
	status int
	// params are the query parameters it takes; any other, or one given
	// twice, is refused before it is served (query).
	params []string
}

func (rt route) pattern() string { return rt.method + " " + Prefix + rt.path }

// routes is everything the API serves.
var routes = []route{
	{http.MethodPost, "/messages", (*Server).ingest, IngestRequest{}, Message{}, http.StatusCreated, nil},
	{http.MethodGet, "/messages", (*Server).listMessages, nil, MessageList{}, http.StatusOK, messageParams},
	{http.MethodGet, "/messages/{id}", (*Server).getMessage, nil, Message{}, http.StatusOK, nil},
	{http.MethodGet, "/messages/{id}/payload", (*Server).getPayload, nil, nil, http.StatusOK, nil},
	{http.MethodGet, "/messages/{id}/history", (*Server).getHistory, nil, History{}, http.StatusOK, nil},
	{http.MethodPost, "/messages/{id}/redispatch", (*Server).redispatch, ActionRequest{}, Message{}, http.StatusOK, nil},
	{http.MethodPost, "/messages/{id}/deliver-now", (*Server).deliverNow, ActionRequest{}, Message{}, http.StatusOK, nil},
	{http.MethodPost, "/messages/{id}/resend", (*Server).resend, ResendRequest{}, Message{}, http.StatusOK, nil},
	{http.MethodPost, "/messages/{id}/replay", (*Server).replay, ReplayRequest{}, Message{}, http.StatusOK, nil},
	{http.MethodPost, "/messages/{id}/deliveries/{delivery_id}/redeliver", (*Server).redeliver, ActionRequest{}, Message{}, http.StatusOK, nil},
	{http.MethodPost, "/messages/{id}/deliveries/{delivery_id}/skip", (*Server).skip, SkipRequest{}, Message{}, http.StatusOK, nil},
	{http.MethodPost, "/deliveries/{id}/receipt", (*Server).receipt, ReceiptRequest{}, Delivery{}, http.StatusOK, nil},
	{http.MethodPost, "/receipts", (*Server).externalReceipt, ExternalReceiptRequest{}, Delivery{}, http.StatusOK, nil},

	{http.MethodGet, "/routes", (*Server).listRoutes, nil, RouteList{}, http.StatusOK, nil},
	{http.MethodPost, "/routes", (*Server).createRoute, RouteRequest{}, lifecycle.Route{}, http.StatusCreated, nil},
	{http.MethodPost, "/routes/try", (*Server).tryRoutes, TryRequest{}, Trial{}, http.StatusOK, nil},
	{http.MethodGet, "/routes/{id}", (*Server).getRoute, nil, lifecycle.Route{}, http.StatusOK, nil},
	{http.MethodPut, "/routes/{id}", (*Server).updateRoute, RouteRequest{}, lifecycle.Route{}, http.StatusOK, nil},
	{http.MethodDelete, "/routes/{id}", (*Server).deleteRoute, nil, nil, http.StatusNoContent, nil},

	{http.MethodGet, "/targets", (*Server).listTargets, nil, TargetList{}, http.StatusOK, nil},
	{http.MethodPost, "/targets", (*Server).createTarget, lifecycle.Target{}, lifecycle.Target{}, http.StatusCreated, nil},
	{http.MethodGet, "/targets/{name}", (*Server).getTarget, nil, lifecycle.Target{}, http.StatusOK, nil},
	{http.MethodPut, "/targets/{name}", (*Server).updateTarget, lifecycle.Target{}, lifecycle.Target{}, http.StatusOK, nil},
	{http.MethodDelete, "/targets/{name}", (*Server).deleteTarget, nil, nil, http.StatusNoContent, nil},
	{http.MethodPost, "/targets/{name}/health/close", (*Server).closeBreaker, nil, lifecycle.Target{}, http.StatusOK, nil},
	{http.MethodGet, "/targets/{name}/lanes", (*Server).listLanes, nil, LaneList{}, http.StatusOK, []string{"blocked", "limit", "cursor"}},
	{http.MethodGet, "/targets/{name}/secret", (*Server).getTargetSecret, nil, TargetSecret{}, http.StatusOK, nil},
	{http.MethodPost, "/targets/{name}/secret/rotate", (*Server).rotateTargetSecret, RotateRequest{}, TargetSecret{}, http.StatusOK, nil},
	{http.MethodGet, "/callbacks/secret", ownSecret("callbacks"), nil, OwnSecret{}, http.StatusOK, nil},
	{http.MethodPost, "/callbacks/secret/rotate", rotateOwnSecret("callbacks"), RotateRequest{}, OwnSecret{}, http.StatusOK, nil},
	{http.MethodGet, "/alerts/secret", ownSecret("alerts"), nil, OwnSecret{}, http.StatusOK, nil},
	{http.MethodPost, "/alerts/secret/rotate", rotateOwnSecret("alerts"), RotateRequest{}, OwnSecret{}, http.StatusOK, nil},

	{http.MethodGet, "/sources", (*Server).listSources, nil, SourceList{}, http.StatusOK, nil},
	{http.MethodPost, "/sources", (*Server).createSource, SourceRequest{}, Source{}, http.StatusCreated, nil},
	{http.MethodGet, "/sources/{name}", (*Server).getSource, nil, Source{}, http.StatusOK, nil},
	{http.MethodPut, "/sources/{name}", (*Server).updateSource, SourceRequest{}, Source{}, http.StatusOK, nil},
	{http.MethodDelete, "/sources/{name}", (*Server).deleteSource, nil, nil, http.StatusNoContent, nil},
	{http.MethodPost, "/sources/{name}/webhook", (*Server).webhook, nil, WebhookReceived{}, http.StatusCreated, nil},

	{http.MethodGet, "/settings", (*Server).getSettings, nil, lifecycle.Settings{}, http.StatusOK, nil},
	{http.MethodPut, "/settings", (*Server).putSettings, lifecycle.Settings{}, lifecycle.Settings{}, http.StatusOK, nil},

	{http.MethodPost, "/operations", (*Server).createOperation, OperationRequest{}, Operation{}, http.StatusAccepted, nil},
	{http.MethodGet, "/operations", (*Server).listOperations, nil, OperationList{}, http.StatusOK, []string{"limit", "cursor"}},
	{http.MethodGet, "/operations/{id}", (*Server).getOperation, nil, Operation{}, http.StatusOK, nil},
	{http.MethodPost, "/operations/{id}/cancel", (*Server).cancelOperation, CancelRequest{}, Operation{}, http.StatusOK, nil},
	{http.MethodGet, "/operations/{id}/refusals", (*Server).listRefusals, nil, RefusalList{}, http.StatusOK, []string{"limit", "cursor"}},

	{http.MethodPost, "/rebuilds", (*Server).startRebuild, nil, Rebuild{}, http.StatusAccepted, nil},
	{http.MethodGet, "/rebuilds/{id}", (*Server).getRebuild, nil, Rebuild{}, http.StatusOK, nil},

	{http.MethodGet, "/tokens", (*Server).listTokens, nil, TokenList{}, http.StatusOK, nil},
	{http.MethodPost, "/tokens", (*Server).createToken, TokenRequest{}, NewToken{}, http.StatusCreated, nil},
	{http.MethodDelete, "/tokens/{name}", (*Server).deleteToken, nil, nil, http.StatusNoContent, nil},

	{http.MethodGet, "/stats", (*Server).stats, nil, Stats{}, http.StatusOK, nil},
	{http.MethodGet, "/journal", (*Server).journal, nil, JournalPage{}, http.StatusOK, []string{"cursor", "limit"}},
	{http.MethodGet, "/openapi.json", (*Server).openAPI, nil, nil, http.StatusOK, nil},
}
