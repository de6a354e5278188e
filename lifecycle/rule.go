package lifecycle

import (
	"fmt"
	"strings"
	"time"
)

// A Rule says in which states, and under which conditions on a delivery's
// own fields and the time, something may happen to a delivery: a claim, a
// wake-up, a lease expiry. The fold checks its transitions with a rule's
// Holds, and every SQL statement that selects deliveries by the same rule
// is built from its SQL, so the two cannot drift apart; a test evaluates
// both, for every state and condition, and compares them with the fold.
type Rule struct {
	// Name says what the rule admits, for messages and tests.
	Name  string
	cases []ruleCase
}

// ruleCase admits a state when any of its conditions holds; with none, it
// admits the state always.
type ruleCase struct {
	state DeliveryState
	any   []Cond
}

// Cond is a condition on a delivery at a time.
type Cond int

// The conditions.
const (
	// Due: next_due is set and not after now.
	Due Cond = iota + 1
	// Woken: a wake-up has been published since the last claim
	// (dispatch_count above zero).
	Woken
	// LeaseOver: lease_end is set and not after now.
	LeaseOver
	// Pending: next_due is set and after now.
	Pending
	// Overdue: next_due is set and at least WakeGrace before now.
	Overdue
	// LeaseLive: lease_end is set and after now.
	LeaseLive
)

// WakeGrace is how long the sweep leaves a retry that has come due to the
// process that recorded it, whose timer claims it on time: it covers that
// process's lateness under load and the clock skew between hosts, and is
// well under the sweep's interval. Past it, the process is taken to be gone
// and the sweep wakes the retry (SweepWakeRule).
const WakeGrace = 2 * time.Second

// Facts are the fields of a delivery that rules read.
type Facts struct {
	State         DeliveryState
	NextDue       time.Time
	DispatchCount int
	LeaseEnd      time.Time
}

// The rules of the lifecycle.
var (
	// ClaimRule: a worker may claim a queued or stalled delivery at any
	// time, and a retrying one once it is due or has been woken since its
	// retry was set (delivery.claimed).
	ClaimRule = Rule{Name: "claimable", cases: []ruleCase{
		{StateQueued, nil}, {StateStalled, nil}, {StateRetrying, []Cond{Due, Woken}},
	}}
	// LeaseExpiryRule: a claim whose lease has run out may be taken back
	// (delivery.lease_expired), by the sweep or by the next claim.
	LeaseExpiryRule = Rule{Name: "lease expired", cases: []ruleCase{
		{StateDelivering, []Cond{LeaseOver}},
	}}
	// InFlightRule: a claim whose lease runs is an attempt in flight,
	// counted against its target's max_concurrent across the cluster; an
	// outcome, a release or the lease's end ends it.
	InFlightRule = Rule{Name: "in flight", cases: []ruleCase{
		{StateDelivering, []Cond{LeaseLive}},
	}}
	// CatchUpRule is what a worker's catch-up takes: what it may claim at
	// once, and what it may claim after recording the lease's expiry.
	CatchUpRule = ClaimRule.Or("catch-up", LeaseExpiryRule)
	// WakeRule: an unclaimed delivery whose wake-up is due is woken again,
	// or stalls once it has used up its wake-ups (delivery.woken,
	// delivery.stalled).
	WakeRule = Rule{Name: "due for a wake-up", cases: []ruleCase{
		{StateQueued, []Cond{Due}}, {StateRetrying, []Cond{Due}},
	}}
	// SweepWakeRule is what the sweep wakes: a queued delivery once due,
	// for its dispatch or last wake-up was published and went unanswered;
	// a retrying one once WakeGrace overdue, for until then the process
	// that recorded the retry claims it by its own timer. It admits only
	// what WakeRule admits.
	SweepWakeRule = Rule{Name: "woken by the sweep", cases: []ruleCase{
		{StateQueued, []Cond{Due}}, {StateRetrying, []Cond{Overdue}},
	}}
	// WaitRule: an unclaimed delivery whose wake-up is not due yet. The
	// fold gives every delivery in WakeRule's states a next_due, so each
	// is in one of the two rules at any time.
	WaitRule = Rule{Name: "waiting for a wake-up", cases: []ruleCase{
		{StateQueued, []Cond{Pending}}, {StateRetrying, []Cond{Pending}},
	}}
	// ReceiptTimeoutRule: a delivery whose receipt deadline has passed
	// fails (delivery.receipt_timed_out).
	ReceiptTimeoutRule = Rule{Name: "receipt overdue", cases: []ruleCase{
		{StateAwaitingAck, []Cond{Due}},
	}}
	// RedeliverRule: an operator may queue a delivery again unless it is
	// still in hand (queued, blocked, delivering or awaiting a receipt);
	// a delivered or skipped one is sent again (delivery.redelivered).
	RedeliverRule = Rule{Name: "redeliverable", cases: []ruleCase{
		{StateRetrying, nil}, {StateFailed, nil}, {StateStalled, nil}, {StateDelivered, nil}, {StateSkipped, nil},
	}}
	// SkipRule: an operator may settle a delivery without sending it
	// unless it is being attempted or already delivered or skipped
	// (delivery.skipped).
	SkipRule = Rule{Name: "skippable", cases: []ruleCase{
		{StateScheduled, nil}, {StateQueued, nil}, {StateBlocked, nil}, {StateRetrying, nil}, {StateStalled, nil},
		{StateFailed, nil}, {StateAwaitingAck, nil},
	}}
	// DueRule: a scheduled delivery whose time has come is queued and
	// woken (delivery.due, by the sweep); an operator's deliver now
	// queues a scheduled one before its time, which the fold admits by
	// the event's early flag.
	DueRule = Rule{Name: "scheduled and due", cases: []ruleCase{
		{StateScheduled, []Cond{Due}},
	}}
	// InHandRule: a delivery still being worked on, or waiting to be: a
	// message is sent again only when none of its current generation is.
	InHandRule = Rule{Name: "in hand", cases: []ruleCase{
		{StateScheduled, nil}, {StateQueued, nil}, {StateBlocked, nil}, {StateDelivering, nil}, {StateRetrying, nil}, {StateAwaitingAck, nil},
	}}
	// SupersedeRule: what a resend or a replay supersedes of the current
	// generation: the deliveries that failed or stalled.
	SupersedeRule = Rule{Name: "superseded by a new generation", cases: []ruleCase{
		{StateFailed, nil}, {StateStalled, nil},
	}}
	// UnblockRule: a blocked delivery moves to queued once the delivery
	// ahead of it in its lane has settled for the lane, or its target no
	// longer keeps order (delivery.unblocked); the lane's condition is
	// checked where lanes are known, in the command and the audit.
	UnblockRule = Rule{Name: "blocked", cases: []ruleCase{{StateBlocked, nil}}}
)

// The rules of a message's outcome callback, a job in the delivery states:
// queued when its message settles, delivering while a call is claimed,
// retrying after a call that failed for now, delivered or failed at last.
var (
	// CallbackClaimRule: the callback worker may call when a callback is
	// queued or retrying and due (message.callback_claimed). Nothing wakes
	// a callback: the worker looks for the due ones.
	CallbackClaimRule = Rule{Name: "callback due", cases: []ruleCase{
		{StateQueued, []Cond{Due}}, {StateRetrying, []Cond{Due}},
	}}
	// CallbackCatchUpRule is what the callback worker takes: what is due,
	// and a call whose lease ran out, after recording the expiry
	// (message.callback_lease_expired).
	CallbackCatchUpRule = CallbackClaimRule.Or("callback catch-up", LeaseExpiryRule)
)

// Rules lists every rule, for the tests that hold the SQL and the fold to
// them.
var Rules = []Rule{ClaimRule, LeaseExpiryRule, InFlightRule, CatchUpRule, WakeRule, SweepWakeRule, WaitRule, ReceiptTimeoutRule, RedeliverRule,
	SkipRule, DueRule, UnblockRule, InHandRule, SupersedeRule, CallbackClaimRule, CallbackCatchUpRule}

// Or is a rule that admits what r or o admits. They must not share a
// state.
func (r Rule) Or(name string, o Rule) Rule {
	for _, c := range o.cases {
		if r.Admits(c.state) {
			panic(fmt.Sprintf("lifecycle: rules %s and %s share state %s", r.Name, o.Name, c.state))
		}
	}
	return Rule{Name: name, cases: append(append([]ruleCase(nil), r.cases...), o.cases...)}
}

// States lists the states the rule may admit, in its order.
func (r Rule) States() []DeliveryState {
	out := make([]DeliveryState, len(r.cases))
	for i, c := range r.cases {
		out[i] = c.state
	}
	return out
}

// Admits reports whether the rule may admit a delivery in state s, under
// some condition.
func (r Rule) Admits(s DeliveryState) bool {
	for _, c := range r.cases {
		if c.state == s {
			return true
		}
	}
	return false
}

// Holds reports whether the rule admits the delivery at now.
func (r Rule) Holds(f Facts, now time.Time) bool {
	for _, c := range r.cases {
		if c.state != f.State {
			continue
		}
		if len(c.any) == 0 {
			return true
		}
		for _, cond := range c.any {
			if cond.holds(f, now) {
				return true
			}
		}
		return false
	}
	return false
}

func (c Cond) holds(f Facts, now time.Time) bool {
	switch c {
	case Due:
		return !f.NextDue.IsZero() && !f.NextDue.After(now)
	case Woken:
		return f.DispatchCount > 0
	case LeaseOver:
		return !f.LeaseEnd.IsZero() && !f.LeaseEnd.After(now)
	case Pending:
		return !f.NextDue.IsZero() && f.NextDue.After(now)
	case Overdue:
		return !f.NextDue.IsZero() && !f.NextDue.After(now.Add(-WakeGrace))
	case LeaseLive:
		return f.LeaseEnd.After(now)
	}
	return false
}

// StatesSQL is "<alias>.state IN (…)" over the rule's states: the
// predicate of a partial index of what the rule may admit.
func (r Rule) StatesSQL(alias string) string {
	return col(alias, "state") + " IN (" + quoted(r.States()) + ")"
}

// StateSQL is the rule's predicate for its deliveries in state s alone,
// which an index on (state, …) reads as one range; "false" when the rule
// does not admit s.
func (r Rule) StateSQL(s DeliveryState, alias, now string) string {
	for _, c := range r.cases {
		if c.state == s {
			return Rule{cases: []ruleCase{c}}.SQL(alias, now)
		}
	}
	return "false"
}

// SQL is the rule as a predicate on the deliveries table seen as alias,
// with now the placeholder (or expression) of the time: its states first,
// so a partial index on them applies, then each state's conditions.
func (r Rule) SQL(alias, now string) string {
	var always []DeliveryState
	var conditional []string
	for _, c := range r.cases {
		if len(c.any) == 0 {
			always = append(always, c.state)
			continue
		}
		conds := make([]string, len(c.any))
		for i, cond := range c.any {
			conds[i] = cond.sql(alias, now)
		}
		conditional = append(conditional,
			col(alias, "state")+" = '"+string(c.state)+"' AND ("+strings.Join(conds, " OR ")+")")
	}
	if len(conditional) == 0 {
		return r.StatesSQL(alias)
	}
	if len(always) > 0 {
		conditional = append([]string{col(alias, "state") + " IN (" + quoted(always) + ")"}, conditional...)
	}
	return r.StatesSQL(alias) + " AND (" + strings.Join(conditional, " OR ") + ")"
}

func (c Cond) sql(alias, now string) string {
	switch c {
	case Due:
		return col(alias, "next_due") + " <= " + now
	case Woken:
		return col(alias, "dispatch_count") + " > 0"
	case LeaseOver:
		return col(alias, "lease_end") + " <= " + now
	case Pending:
		return col(alias, "next_due") + " > " + now
	case Overdue:
		return col(alias, "next_due") + " <= " + now + "::timestamptz - " + fmt.Sprintf("interval '%d microseconds'", WakeGrace.Microseconds())
	case LeaseLive:
		return col(alias, "lease_end") + " > " + now
	}
	panic(fmt.Sprintf("lifecycle: condition %d has no SQL", c))
}

func col(alias, name string) string {
	if alias == "" {
		return name
	}
	return alias + "." + name
}

// quoted lists values as SQL string literals. They are the package's own
// constants, never input.
func quoted[T ~string](values []T) string {
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = "'" + string(v) + "'"
	}
	return strings.Join(parts, ", ")
}

// StatusesSQL is "<column> IN (…)" over the message statuses or delivery
// states.
func StatusesSQL[T MessageStatus | DeliveryState](column string, statuses []T) string {
	return column + " IN (" + quoted(statuses) + ")"
}
