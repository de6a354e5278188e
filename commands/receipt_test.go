package commands_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

const gateway = "operator:gateway"

// handOver ingests a message and hands its delivery to target over with
// the receiver's id, awaiting a receipt.
func (b *bundle) handOver(t *testing.T, target, id string) projection.Delivery {
	t.Helper()
	m, _, err := b.w.Ingest(b.ctx, newMessage())
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for m.Deliveries[i].Target != target {
		i++
	}
	d := m.Deliveries[i]
	c, err := b.w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	o := lifecycle.AwaitingAck("202 Accepted", b.clock.Now().Add(time.Hour))
	o.ExternalID = id
	m, err = b.w.Complete(b.ctx, d.ID, c.Token, o)
	if err != nil {
		t.Fatal(err)
	}
	return *m.Delivery(d.ID)
}

func (b *bundle) receiptBy(target, id string, final, positive bool) (*projection.Message, uuid.UUID, error) {
	return b.w.ReceiptByExternalID(b.ctx, commands.ExternalReceipt{Target: target, ExternalID: id, Final: final,
		Positive: positive, Status: "UNDELIV", Code: "013", Text: "no such subscriber"}, gateway)
}

// TestReceiptByExternalID: intermediate receipts are journaled and settle
// nothing; the first final one settles the delivery with the receiver's
// status and code, and consumes the id; after it, the id is consumed; an
// id nobody gave is not found. Neither changes anything.
func TestReceiptByExternalID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "sms")
	d := b.handOver(t, "sms", "SM-1")

	for range 2 {
		m, id, err := b.receiptBy("sms", "SM-1", false, false)
		if err != nil || id != d.ID || m.Delivery(d.ID).State != lifecycle.StateAwaitingAck {
			t.Fatalf("intermediate: %v %v", id, err)
		}
	}
	m, _, err := b.receiptBy("sms", "SM-1", true, false)
	if err != nil {
		t.Fatal(err)
	}
	got := m.Delivery(d.ID)
	if got.State != lifecycle.StateFailed || got.LastError != "negative receipt: status UNDELIV, code 013: no such subscriber" {
		t.Fatalf("settled %+v", got)
	}
	before := dbtest.Kinds(t, b.db, d)
	if _, _, err := b.receiptBy("sms", "SM-1", true, true); !errors.Is(err, commands.ErrCorrelationConsumed) {
		t.Fatalf("second final receipt: %v", err)
	}
	if _, _, err := b.receiptBy("sms", "SM-1", false, true); !errors.Is(err, commands.ErrCorrelationConsumed) {
		t.Fatalf("intermediate receipt after the final: %v", err)
	}
	for _, unknown := range []struct{ target, id string }{{"sms", "SM-2"}, {"mail", "SM-1"}} {
		if _, _, err := b.receiptBy(unknown.target, unknown.id, true, true); !errors.Is(err, commands.ErrNotFound) {
			t.Fatalf("receipt by %v: %v", unknown, err)
		}
	}
	after := dbtest.Kinds(t, b.db, d)
	want := []journal.Kind{journal.KindDeliveryClaimed, journal.KindDeliveryAttempted, journal.KindReceiptIntermediate,
		journal.KindReceiptIntermediate, journal.KindReceiptReceived}
	if len(before) != len(after) || len(after) != len(want) {
		t.Fatalf("kinds %v, then %v, want %v", before, after, want)
	}
	for i := range want {
		if after[i] != want[i] {
			t.Fatalf("kinds %v, want %v", after, want)
		}
	}
	if _, _, err := b.w.ReceiptByExternalID(b.ctx, commands.ExternalReceipt{Target: "Sms", ExternalID: ""}, gateway); !errors.Is(err, commands.ErrInvalid) {
		t.Errorf("invalid receipt: %v", err)
	}
	long := commands.ExternalReceipt{Target: "sms", ExternalID: "SM-1", Final: true, Text: strings.Repeat("x", lifecycle.MaxReceiptTextLength+1)}
	if _, _, err := b.w.ReceiptByExternalID(b.ctx, long, gateway); !errors.Is(err, commands.ErrInvalid) {
		t.Errorf("a receipt of too long a text: %v", err)
	}
	dbtest.Audit(t, b.db)
}

// TestExternalIDIsUniquePerTarget: an id a receiver gives again moves to
// the newest delivery of its target; another target's delivery with the
// same id is apart. A final receipt for a delivery that awaits none is
// refused, journaled, and consumes the id.
func TestExternalIDIsUniquePerTarget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "sms", "fax")
	old := b.handOver(t, "sms", "X")
	other := b.handOver(t, "fax", "X")
	newest := b.handOver(t, "sms", "X")

	m, id, err := b.receiptBy("sms", "X", true, true)
	if err != nil || id != newest.ID || m.Delivery(newest.ID).State != lifecycle.StateDelivered {
		t.Fatalf("receipt by X of sms settled %v: %v", id, err)
	}
	m, id, err = b.receiptBy("fax", "X", true, true)
	if err != nil || id != other.ID || m.Delivery(other.ID).State != lifecycle.StateDelivered {
		t.Fatalf("receipt by X of fax settled %v: %v", id, err)
	}
	got, err := projection.Load(b.ctx, b.db, old.MessageID)
	if err != nil || got.Delivery(old.ID).State != lifecycle.StateAwaitingAck {
		t.Fatalf("the older delivery: %v", err)
	}

	// A receipt for a delivery no longer awaiting one.
	late := b.handOver(t, "sms", "L")
	b.clock.Advance(2 * time.Hour)
	if kind, err := b.w.TimeoutReceipt(b.ctx, late.ID); err != nil || kind != journal.KindReceiptTimedOut {
		t.Fatalf("time out: %v %v", kind, err)
	}
	_, _, err = b.receiptBy("sms", "L", true, true)
	var se *commands.StateError
	if !errors.As(err, &se) || !errors.Is(err, commands.ErrReceiptRefused) || se.State != string(lifecycle.StateFailed) {
		t.Fatalf("late receipt: %v", err)
	}
	if _, _, err := b.receiptBy("sms", "L", true, true); !errors.Is(err, commands.ErrCorrelationConsumed) {
		t.Fatalf("second late receipt: %v", err)
	}
	dbtest.Audit(t, b.db)
}

// TestConcurrentFinalReceiptsSettleOnce: final receipts by one id at once
// settle the delivery once; the others find the id consumed.
func TestConcurrentFinalReceiptsSettleOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "sms")
	d := b.handOver(t, "sms", "C")
	var (
		wg                sync.WaitGroup
		mu                sync.Mutex
		settled, consumed int
	)
	for i := range 8 {
		wg.Go(func() {
			_, _, err := b.receiptBy("sms", "C", true, i%2 == 0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				settled++
			case errors.Is(err, commands.ErrCorrelationConsumed):
				consumed++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if settled != 1 || consumed != 7 {
		t.Fatalf("%d settled, %d consumed", settled, consumed)
	}
	kinds := dbtest.Kinds(t, b.db, d)
	if n := len(kinds); n != 3 || kinds[2] != journal.KindReceiptReceived {
		t.Fatalf("kinds %v", kinds)
	}
	dbtest.Audit(t, b.db)
}

// TestReceiptByExternalIDLetsTheLaneGo: the final receipt by id that
// settles the head of a fifo lane lets the next delivery of the lane go,
// in the same transaction, as a receipt by delivery does.
func TestReceiptByExternalIDLetsTheLaneGo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "sms", Kind: "http", Enabled: true, Config: sinkConfig,
		Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingFIFO}}, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "sms"}, admin); err != nil {
		t.Fatal(err)
	}
	in := newMessage()
	in.OrderingKey = "patient-7"
	first, _, err := b.w.Ingest(b.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := b.w.Ingest(b.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if s := second.Deliveries[0].State; s != lifecycle.StateBlocked {
		t.Fatalf("the second of the lane is %s", s)
	}
	d := first.Deliveries[0]
	c, err := b.w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	o := lifecycle.AwaitingAck("202 Accepted", b.clock.Now().Add(time.Hour))
	o.ExternalID = "SM-7"
	if _, err := b.w.Complete(b.ctx, d.ID, c.Token, o); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.receiptBy("sms", "SM-7", true, true); err != nil {
		t.Fatal(err)
	}
	got, err := projection.Load(b.ctx, b.db, second.ID)
	if err != nil || got.Deliveries[0].State != lifecycle.StateQueued {
		t.Fatalf("the second after the receipt: %v", err)
	}
	dbtest.Audit(t, b.db)
}

// TestFinalReceiptsInOneBatchSettleOnce queues two final receipts by one
// id behind two busy batches, so that one batch decides both: the first
// settles the delivery and consumes the id, the second finds the id
// consumed, as the first left it, and journals nothing.
func TestFinalReceiptsInOneBatchSettleOnce(t *testing.T) {
	t.Parallel()
	lb := setupLock(t)
	lb.targets(t, "sms")
	d := lb.handOver(t, "sms", "C")
	release := lb.busy(t)
	sizes := lb.batchSizes()
	var (
		wg   sync.WaitGroup
		errs [2]error
	)
	for i := range errs {
		wg.Go(func() {
			_, _, errs[i] = lb.w.ReceiptByExternalID(lb.ctx, commands.ExternalReceipt{Target: "sms", ExternalID: "C", Final: true,
				Positive: true, Status: "DELIVRD"}, gateway)
		})
		lb.untilPending(t, i+1)
	}
	release()
	wg.Wait()
	if got := sizes(); !slices.Equal(got, []int{2}) {
		t.Errorf("batch sizes %v, want [2]", got)
	}
	if errs[0] != nil || !errors.Is(errs[1], commands.ErrCorrelationConsumed) {
		t.Fatalf("the receipts: %v, %v; want nil, then the id consumed", errs[0], errs[1])
	}
	kinds := dbtest.Kinds(t, lb.db, d)
	if want := []journal.Kind{journal.KindDeliveryClaimed, journal.KindDeliveryAttempted, journal.KindReceiptReceived}; !slices.Equal(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
	lb.noLostRacesAndAudit(t)
}

// TestAReceiptAfterAHandOverInOneBatchFollowsTheID queues the hand-over
// of a second delivery that takes the receiver's id "X" from the first,
// then a final receipt by "X" read while the first had it, behind two busy
// batches, so that one batch decides both: the receipt finds the id moved
// and settles the second delivery, whose id it is; the first still awaits
// its receipt.
func TestAReceiptAfterAHandOverInOneBatchFollowsTheID(t *testing.T) {
	t.Parallel()
	lb := setupLock(t)
	lb.targets(t, "sms")
	first := lb.handOver(t, "sms", "X")
	second := lb.ingest(t).Deliveries[0]
	c, err := lb.w.Claim(lb.ctx, second.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, settled, rerr := lb.handOverThenReceipt(t, second.ID, c.Token, "X", commands.ExternalReceipt{Target: "sms", ExternalID: "X",
		Final: true, Positive: true, Status: "DELIVRD"})
	if rerr != nil || settled != second.ID {
		t.Fatalf("the receipt by X settled %v (the first is %v, the second %v): %v", settled, first.ID, second.ID, rerr)
	}
	for _, want := range []struct {
		d     projection.Delivery
		state lifecycle.DeliveryState
	}{{first, lifecycle.StateAwaitingAck}, {second, lifecycle.StateDelivered}} {
		m, err := projection.Load(lb.ctx, lb.db, want.d.MessageID)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Delivery(want.d.ID).State; got != want.state {
			t.Errorf("delivery %v is %s, want %s", want.d.ID, got, want.state)
		}
	}
	got, err := projection.LoadCorrelation(lb.ctx, lb.db, projection.CorrelationKey{Target: "sms", ExternalID: "X"})
	if err != nil || got.DeliveryID != second.ID || !got.Consumed {
		t.Fatalf("correlation of X %+v, %v; want the second's, consumed", got, err)
	}
	lb.noLostRacesAndAudit(t)
}

// TestLateReceiptOfAnEarlierHandOver: a delivery handed over as SM-1,
// timed out and redelivered, is handed over again as SM-2. A late
// negative receipt by SM-1 is refused and consumes SM-1, naming the later
// hand-over, while the delivery still awaits SM-2's, which settles it. A
// late positive receipt by an earlier id still delivers: the receiver
// says the message arrived.
func TestLateReceiptOfAnEarlierHandOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "sms")
	again := func(d projection.Delivery, id string) {
		t.Helper()
		c := b.redeliverLate(t, d)
		o := lifecycle.AwaitingAck("202 Accepted", b.clock.Now().Add(time.Hour))
		o.ExternalID = id
		if _, err := b.w.Complete(b.ctx, d.ID, c.Token, o); err != nil {
			t.Fatal(err)
		}
	}
	d := b.handOver(t, "sms", "SM-1")
	again(d, "SM-2")
	m, id, err := b.receiptBy("sms", "SM-1", true, false)
	var se *commands.StateError
	if !errors.Is(err, commands.ErrReceiptRefused) || !errors.As(err, &se) || !strings.Contains(se.Reason, `handed over again, as "SM-2"`) ||
		id != d.ID || m.Delivery(d.ID).State != lifecycle.StateAwaitingAck {
		t.Fatalf("a late negative receipt by SM-1: %v, %v, %+v", err, id, m)
	}
	if _, _, err := b.receiptBy("sms", "SM-1", true, false); !errors.Is(err, commands.ErrCorrelationConsumed) {
		t.Fatalf("SM-1 again: %v", err)
	}
	b.audit(t) // awaiting SM-2's receipt, SM-1 refused as superseded
	if m, _, err := b.receiptBy("sms", "SM-2", true, true); err != nil || m.Delivery(d.ID).State != lifecycle.StateDelivered {
		t.Fatalf("SM-2's receipt: %v", err)
	}

	late := b.handOver(t, "sms", "SM-3")
	again(late, "SM-4")
	if m, _, err := b.receiptBy("sms", "SM-3", true, true); err != nil || m.Delivery(late.ID).State != lifecycle.StateDelivered {
		t.Fatalf("a late positive receipt by SM-3: %v", err)
	}
	b.audit(t)
}

// TestLateReceiptInTheBatchOfTheLaterHandOver: a late negative receipt by
// an earlier hand-over's id, in the batch that hands the delivery over
// again, is decided again once that hand-over is in the journal, and
// refused: the delivery awaits the later one's receipt.
func TestLateReceiptInTheBatchOfTheLaterHandOver(t *testing.T) {
	t.Parallel()
	lb := setupLock(t)
	lb.targets(t, "sms")
	d := lb.handOver(t, "sms", "SM-1")
	c := lb.redeliverLate(t, d)
	_, _, rerr := lb.handOverThenReceipt(t, d.ID, c.Token, "SM-2", commands.ExternalReceipt{Target: "sms", ExternalID: "SM-1",
		Final: true, Status: "UNDELIV"})
	m, err := projection.Load(lb.ctx, lb.db, d.MessageID)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(rerr, commands.ErrReceiptRefused) || m.Delivery(d.ID).State != lifecycle.StateAwaitingAck {
		t.Fatalf("the receipt by SM-1: %v; the delivery %s", rerr, m.Delivery(d.ID).State)
	}
	lb.noLostRacesAndAudit(t)
}

// redeliverLate lets the receipt of d, handed over, time out, redelivers
// it as an operator would, and claims it again.
func (b *bundle) redeliverLate(t *testing.T, d projection.Delivery) commands.Claim {
	t.Helper()
	b.clock.Advance(2 * time.Hour)
	if kind, err := b.w.TimeoutReceipt(b.ctx, d.ID); err != nil || kind != journal.KindReceiptTimedOut {
		t.Fatalf("time out: %v %v", kind, err)
	}
	if _, err := b.w.Redeliver(b.ctx, d.MessageID, d.ID, commands.Action{Operator: "admin"}); err != nil {
		t.Fatal(err)
	}
	c, err := b.w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// handOverThenReceipt queues the hand-over of the delivery id, claimed
// with token, under the receiver's id as, then the receipt r, behind busy
// batches, so that one batch decides both; it returns what the receipt
// returned.
func (lb *lockBundle) handOverThenReceipt(t *testing.T, id, token uuid.UUID, as string, r commands.ExternalReceipt) (*projection.Message, uuid.UUID, error) {
	t.Helper()
	release := lb.busy(t)
	sizes := lb.batchSizes()
	var wg sync.WaitGroup
	wg.Go(func() {
		o := lifecycle.AwaitingAck("202 Accepted", lb.clock.Now().Add(time.Hour))
		o.ExternalID = as
		if _, err := lb.w.Complete(lb.ctx, id, token, o); err != nil {
			t.Errorf("the hand-over as %s: %v", o.ExternalID, err)
		}
	})
	lb.untilPending(t, 1)
	var (
		m       *projection.Message
		settled uuid.UUID
		err     error
	)
	wg.Go(func() { m, settled, err = lb.w.ReceiptByExternalID(lb.ctx, r, gateway) })
	lb.untilPending(t, 2)
	release()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if got := sizes(); len(got) == 0 || got[0] != 2 {
		t.Errorf("batch sizes %v, want 2 first", got)
	}
	return m, settled, err
}
