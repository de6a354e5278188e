package projection

import (
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

// change sets v, a field, to another value of its type.
func change(t *testing.T, name string, v reflect.Value) {
	t.Helper()
	switch {
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(v.Interface().(time.Time).Add(time.Microsecond)))
	case v.Kind() == reflect.String:
		v.SetString(v.String() + "x")
	case v.Kind() == reflect.Int || v.Kind() == reflect.Int64:
		v.SetInt(v.Int() + 1)
	case v.Kind() == reflect.Bool:
		v.SetBool(!v.Bool())
	case v.Type() == reflect.TypeFor[map[string]string]():
		v.Set(reflect.ValueOf(map[string]string{"x-tenant": "acme"}))
	case v.Type() == reflect.TypeFor[uuid.UUID]():
		v.Set(reflect.ValueOf(uuid.New()))
	case v.Type() == reflect.TypeFor[lifecycle.Trace]():
		v.Set(reflect.ValueOf(lifecycle.Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}))
	case v.Kind() == reflect.Bool:
		v.SetBool(!v.Bool())
	default:
		t.Fatalf("field %s: the test cannot change a %s", name, v.Type())
	}
}

// TestSameFieldsCoverEveryField checks that sameMessage and sameDelivery
// see a change in every field diffFields compares, and take times by
// instant as it does.
func TestSameFieldsCoverEveryField(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 8000, time.UTC)
	base := Message{ID: uuid.New(), Version: 3, Source: "erp", From: "a", To: "b", ContentType: "text/plain",
		IdempotencyKey: "k", PayloadSize: 5, PayloadSHA256: "ab", Stage: "dispatched", Refusal: "r",
		Status: "delivered", Error: "e", AttemptCount: 2, CreatedAt: at, UpdatedAt: at}
	baseDelivery := Delivery{ID: uuid.New(), MessageID: base.ID, Seq: 1, Target: "alpha", State: "retrying",
		Attempts: 1, DispatchCount: 2, Redeliveries: 1, NextDue: at, ClaimToken: uuid.New(), LeaseEnd: at,
		LastError: "503", CreatedAt: at, UpdatedAt: at, FinishedAt: at}

	elsewhere := base
	elsewhere.CreatedAt = at.In(time.FixedZone("x", 3600))
	if !sameMessage(&base, &elsewhere) || len(diffFields(base, elsewhere, "Deliveries")) != 0 {
		t.Error("a message time in another zone differs")
	}
	for i := range reflect.TypeFor[Message]().NumField() {
		name := reflect.TypeFor[Message]().Field(i).Name
		if name == "Deliveries" || name == "Callback" {
			continue
		}
		m := base
		change(t, name, reflect.ValueOf(&m).Elem().Field(i))
		if sameMessage(&base, &m) || len(diffFields(base, m, "Deliveries", "Callback")) != 1 {
			t.Errorf("Message.%s: sameMessage %v, diffFields %v", name, sameMessage(&base, &m), diffFields(base, m, "Deliveries", "Callback"))
		}
	}
	for i := range reflect.TypeFor[Delivery]().NumField() {
		name := reflect.TypeFor[Delivery]().Field(i).Name
		d := baseDelivery
		change(t, name, reflect.ValueOf(&d).Elem().Field(i))
		if sameDelivery(&baseDelivery, &d) || len(diffFields(baseDelivery, d)) != 1 {
			t.Errorf("Delivery.%s: sameDelivery %v, diffFields %v", name, sameDelivery(&baseDelivery, &d), diffFields(baseDelivery, d))
		}
	}
	if !sameDelivery(&baseDelivery, &baseDelivery) {
		t.Error("a delivery differs from itself")
	}
	baseCallback := Callback{MessageID: base.ID, URL: "http://x/", Seq: 2, Status: "delivered", SettledAt: at,
		Deliveries: []CallbackDelivery{{Target: "alpha", State: "delivered"}}, State: "retrying", Attempts: 3,
		NextDue: at, ClaimToken: uuid.New(), LeaseEnd: at, LastError: "503", UpdatedAt: at, FinishedAt: at}
	for i := range reflect.TypeFor[Callback]().NumField() {
		name := reflect.TypeFor[Callback]().Field(i).Name
		cb := baseCallback
		if name == "Deliveries" {
			cb.Deliveries = []CallbackDelivery{{Target: "beta"}}
		} else {
			change(t, name, reflect.ValueOf(&cb).Elem().Field(i))
		}
		if sameCallback(&baseCallback, &cb) || len(diffFields(baseCallback, cb)) != 1 {
			t.Errorf("Callback.%s: sameCallback %v, diffFields %v", name, sameCallback(&baseCallback, &cb), diffFields(baseCallback, cb))
		}
	}
}
