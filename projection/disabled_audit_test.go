package projection_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// TestAuditNamesAClaimOfADisabledTarget forges, behind the commands' back,
// a claim for a target after its target.disabled, and another after an
// operator's target.updated enabled it again: the audit names the first
// alone.
func TestAuditNamesAClaimOfADisabledTarget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ms []*projection.Message
	for range 2 {
		m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	version, err := journal.StreamVersion(b.ctx, b.db, journal.ConfigStream)
	if err != nil {
		t.Fatal(err)
	}
	alpha := ms[0].Deliveries[0]
	if alpha.Target != "alpha" {
		t.Fatalf("first delivery to %s", alpha.Target)
	}
	claim := func(m *projection.Message) journal.Event {
		d := m.Deliveries[0]
		return journal.Event{RecordedAt: b.now, Stream: journal.MessageStream(m.ID), Version: m.Version + 1, DeliveryID: d.ID,
			Target: d.Target, Actor: journal.WorkerActor(d.Target), OldState: lifecycle.StateQueued, NewState: lifecycle.StateDelivering,
			Payload: &journal.DeliveryClaimed{Token: uuid.New(), Attempt: 1, LeaseEnd: b.now.Add(time.Minute)}}
	}
	all, err := b.w.Targets(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	enabled := all[slices.IndexFunc(all, func(tg lifecycle.Target) bool { return tg.Name == "alpha" })]
	events := []journal.Event{
		{RecordedAt: b.now, Stream: journal.ConfigStream, Version: version + 1, Actor: journal.WorkerActor("alpha"),
			Payload: &journal.TargetDisabled{Target: "alpha", Reason: journal.DisabledGone, MessageID: uuid.New(), DeliveryID: uuid.New(), StatusCode: 410}},
		claim(ms[0]),
		{RecordedAt: b.now, Stream: journal.ConfigStream, Version: version + 2, Actor: "operator:admin",
			Payload: &journal.TargetUpdated{Target: enabled}},
		claim(ms[1]),
	}
	named := b.auditAfter(t, events, "which the target.disabled at position")
	if len(named) != 1 || named[0].DeliveryID != alpha.ID || !strings.Contains(named[0].Problem, "claimed for target alpha") {
		t.Fatalf("violations about a disabled target: %v", named)
	}
}

// TestAuditHoldsClaimsToAClusterMaxConcurrent forges two claims in flight
// for a target after a target.updated gave it max_concurrent 1: the audit
// names the second when the definition bounds the cluster, and neither
// when it was journaled by a build whose max_concurrent bounded each
// process (no cluster_limits).
func TestAuditHoldsClaimsToAClusterMaxConcurrent(t *testing.T) {
	t.Parallel()
	for _, cluster := range []bool{true, false} {
		b := setup(t)
		var ms []*projection.Message
		for range 2 {
			m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m)
		}
		version, err := journal.StreamVersion(b.ctx, b.db, journal.ConfigStream)
		if err != nil {
			t.Fatal(err)
		}
		all, err := b.w.Targets(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		alpha := all[slices.IndexFunc(all, func(tg lifecycle.Target) bool { return tg.Name == "alpha" })]
		alpha.MaxConcurrent = 1
		events := []journal.Event{{RecordedAt: b.now, Stream: journal.ConfigStream, Version: version + 1, Actor: "operator:admin",
			Payload: &journal.TargetUpdated{Target: alpha, ClusterLimits: cluster}}}
		for _, m := range ms {
			d := m.Deliveries[0]
			events = append(events, journal.Event{RecordedAt: b.now, Stream: journal.MessageStream(m.ID), Version: m.Version + 1,
				DeliveryID: d.ID, Target: d.Target, Actor: journal.WorkerActor(d.Target), OldState: lifecycle.StateQueued,
				NewState: lifecycle.StateDelivering, Payload: &journal.DeliveryClaimed{Token: uuid.New(), Attempt: 1, LeaseEnd: b.now.Add(time.Minute)}})
		}
		named := b.auditAfter(t, events, "past its max_concurrent")
		switch {
		case cluster && (len(named) != 1 || named[0].DeliveryID != ms[1].Deliveries[0].ID ||
			!strings.Contains(named[0].Problem, "with 2 attempts in flight, past its max_concurrent 1")):
			t.Errorf("violations of a max_concurrent across the cluster: %v", named)
		case !cluster && len(named) != 0:
			t.Errorf("violations of a max_concurrent per process: %v", named)
		}
	}
}

// TestAuditLetsAHalfOpenBreakerOneProbeAtATime forges, behind the
// commands' back, three claims of a target whose breaker is half-open:
// the second, while the first's lease runs, is named; the third, after
// that lease has ended, is a probe of its own.
func TestAuditLetsAHalfOpenBreakerOneProbeAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ms []*projection.Message
	for range 3 {
		m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	stream := journal.TargetStream("alpha")
	events := []journal.Event{
		{RecordedAt: b.now, Stream: stream, Version: 1, Actor: journal.WorkerActor("alpha"), Payload: &journal.BreakerOpened{
			Target: "alpha", Requests: 10, Failures: 10, Window: lifecycle.Duration(time.Minute), Cooldown: lifecycle.Duration(time.Second),
			Until: b.now.Add(time.Second)}},
		{RecordedAt: b.now.Add(time.Second), Stream: stream, Version: 2, Actor: journal.WorkerActor("alpha"),
			Payload: &journal.BreakerHalfOpened{Target: "alpha"}},
	}
	for i, at := range []time.Duration{2 * time.Second, 3 * time.Second, 3*time.Second + time.Minute} {
		m, d := ms[i], ms[i].Deliveries[0]
		events = append(events, journal.Event{RecordedAt: b.now.Add(at), Stream: journal.MessageStream(m.ID), Version: m.Version + 1,
			DeliveryID: d.ID, Target: d.Target, Actor: journal.WorkerActor(d.Target), OldState: lifecycle.StateQueued,
			NewState: lifecycle.StateDelivering, Payload: &journal.DeliveryClaimed{Token: uuid.New(), Attempt: 1, LeaseEnd: b.now.Add(at + time.Minute)}})
	}
	named := b.auditAfter(t, events, "half-open")
	if len(named) != 1 || named[0].DeliveryID != ms[1].Deliveries[0].ID {
		t.Fatalf("violations of a half-open breaker: %v", named)
	}
}

// auditAfter appends events to the journal, audits it whole, and returns
// the violations whose problem names problem.
func (b *bundle) auditAfter(t *testing.T, events []journal.Event, problem string) []projection.Violation {
	t.Helper()
	var batch pgx.Batch
	if err := journal.Queue(&batch, events...); err != nil {
		t.Fatal(err)
	}
	if err := b.db.SendBatch(b.ctx, &batch).Close(); err != nil {
		t.Fatal(err)
	}
	r, err := projection.Audit(b.ctx, b.db, uuid.Nil)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(r.Violations, func(v projection.Violation) bool {
		return !strings.Contains(v.Problem, problem)
	})
}
