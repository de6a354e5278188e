package retention_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/bulk"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
)

// operate creates a bulk operation of action on the messages of source erp
// and runs it to its end with a runner of its own; it returns the
// operation as it ended and the reason of each refusal, by message.
func (b *bundle) operate(t testing.TB, action lifecycle.OperationAction) (*projection.Operation, map[uuid.UUID]string) {
	t.Helper()
	o, err := b.w.CreateOperation(b.ctx, commands.OperationSpec{Action: action, Filter: lifecycle.OperationFilter{Source: "erp"}}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	return b.run(t, o)
}

// run runs the operation o to its end.
func (b *bundle) run(t testing.TB, o *projection.Operation) (*projection.Operation, map[uuid.UUID]string) {
	t.Helper()
	r, err := bulk.New(bulk.Config{Base: service.Base{Now: b.clock.Now, Logger: quiet}, Writer: b.w, DB: b.db})
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		res, err := r.Step(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Operation == uuid.Nil {
			break
		}
	}
	ended, err := projection.LoadOperation(b.ctx, b.db, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	refusals, err := projection.Refusals(b.ctx, b.db, o.ID, projection.RefusalAt{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[uuid.UUID]string{}
	for _, r := range refusals {
		reasons[r.MessageID] = r.Reason
	}
	return ended, reasons
}

// TestBulkOperationsRefuseWhatRetentionTook: an operation listed messages
// that retention then removed or whose payload it expunged. Each action
// refuses every one of them, with a reason that says why, and acts on
// none; a message an earlier operation acted on leaves like any other, and
// the audit stays clean throughout.
func TestBulkOperationsRefuseWhatRetentionTook(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.retain(t, time.Hour, 2*time.Hour, 0)

	// Redelivered by an operation, then delivered: it leaves with the
	// events that carry the operation.
	redone := b.settle(t, lifecycle.Failed("400"))
	if o, refused := b.operate(t, lifecycle.ActionRedeliver); o.Done != 1 || len(refused) != 0 {
		t.Fatalf("redeliver ended %+v, refused %v", o, refused)
	}
	b.attempt(t, redone.Deliveries[0].ID, lifecycle.Delivered("200"))
	removed := b.settle(t, lifecycle.Delivered("200"))
	b.clock.Advance(time.Hour)
	expunged := b.settle(t, lifecycle.Delivered("200"))

	// The operations list the three before retention acts.
	var ops []*projection.Operation
	actions := []lifecycle.OperationAction{lifecycle.ActionResend, lifecycle.ActionReplay, lifecycle.ActionRedeliver, lifecycle.ActionSkip}
	for _, action := range actions {
		o, err := b.w.CreateOperation(b.ctx, commands.OperationSpec{Action: action, Filter: lifecycle.OperationFilter{Source: "erp"}}, "alice")
		if err != nil || o.Matched != 3 {
			t.Fatalf("%s: %+v, %v", action, o, err)
		}
		ops = append(ops, o)
	}
	b.clock.Advance(time.Hour)
	if r := b.pass(t); r.Removed() != 2 || r.Expunged != 3 {
		t.Fatalf("pass %+v", r)
	}
	b.mustLive(t, redone.ID, false)
	b.mustLive(t, removed.ID, false)
	if live, payload := b.live(t, expunged.ID); !live || payload {
		t.Fatalf("the expunged one: live %v, payload %v", live, payload)
	}

	for i, o := range ops {
		ended, refused := b.run(t, o)
		if ended.State != lifecycle.OperationDone || ended.Done != 0 || ended.Refused != 3 {
			t.Errorf("%s ended %+v", actions[i], ended)
		}
		for _, id := range []uuid.UUID{redone.ID, removed.ID} {
			if !strings.Contains(refused[id], "retention removed it") {
				t.Errorf("%s refused message %s: %q", actions[i], id, refused[id])
			}
		}
		// A resend and a replay refuse the expunged payload as Resendable
		// does; a redeliver and a skip find nothing to take in a settled
		// message.
		want := "no delivery of generation 1"
		if actions[i] == lifecycle.ActionResend || actions[i] == lifecycle.ActionReplay {
			want = "its payload was expunged by retention"
		}
		if !strings.Contains(refused[expunged.ID], want) {
			t.Errorf("%s refused the expunged one: %q, want %q", actions[i], refused[expunged.ID], want)
		}
	}
	if m := b.load(t, expunged.ID); m.Generation != 1 || m.Version != expunged.Version+1 {
		t.Errorf("the expunged one changed: generation %d, version %d", m.Generation, m.Version)
	}
	b.audit(t)
	b.rebuild(t)
}
