package workers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/netguard"
	"github.com/waybill/waybill/internal/plainjson"
	"github.com/waybill/waybill/internal/tracing"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/targets"
)

// CallbackWork is one call of a message's outcome callback: the POST of
// Body to URL.
type CallbackWork struct {
	MessageID uuid.UUID
	// Seq is the settlement called back for, from 1.
	Seq int
	URL string
	// Body is what the call says: {message_id, status, deliveries, at}.
	Body []byte
	// Attempt is the call's number for this settlement, from 1; Since
	// is when the message settled. The retry policy counts from them.
	Attempt int
	Since   time.Time
	// Trace is the message's trace context, which the call's span
	// continues.
	Trace lifecycle.Trace
}

// callbackBody is what a callback says.
type callbackBody struct {
	MessageID  uuid.UUID               `json:"message_id"`
	Status     lifecycle.MessageStatus `json:"status"`
	Deliveries []callbackDelivery      `json:"deliveries"`
	At         time.Time               `json:"at"`
}

type callbackDelivery struct {
	Target    string                  `json:"target"`
	State     lifecycle.DeliveryState `json:"state"`
	LastError *string                 `json:"last_error"`
}

// callbackWork is the work of a claimed callback.
func callbackWork(c commands.CallbackClaim) CallbackWork {
	cb := c.Callback
	body := callbackBody{MessageID: cb.MessageID, Status: cb.Status, Deliveries: make([]callbackDelivery, 0, len(cb.Deliveries)), At: cb.SettledAt}
	for _, d := range cb.Deliveries {
		// The sender chose where the call goes: it reads a remote
		// server's answer as its code alone, as through the API.
		var last *string
		if d.LastError != "" {
			code := lifecycle.ErrorCode(d.LastError)
			last = &code
		}
		body.Deliveries = append(body.Deliveries, callbackDelivery{Target: d.Target, State: d.State, LastError: last})
	}
	data, _ := plainjson.Marshal(body) // plain values: cannot fail
	return CallbackWork{MessageID: cb.MessageID, Seq: cb.Seq, URL: cb.URL, Body: data, Attempt: c.Attempt, Since: cb.SettledAt,
		Trace: c.Trace}
}

// CallbackStore is the Store of the messages' outcome callbacks: the
// commands of the core, a job's id being its message's.
type CallbackStore struct {
	w       *commands.Writer
	lease   time.Duration
	metrics *prometheus.CounterVec
}

var _ Store[CallbackWork] = (*CallbackStore)(nil)

// Claim claims a message's callback for one call.
func (s *CallbackStore) Claim(ctx context.Context, id uuid.UUID) (Job[CallbackWork], error) {
	c, err := s.w.ClaimCallback(ctx, id, s.lease)
	if err != nil {
		return Job[CallbackWork]{}, err
	}
	return Job[CallbackWork]{ID: id, Token: c.Token, LeaseEnd: c.LeaseEnd, Work: callbackWork(c)}, nil
}

// HeldUntil is zero: no callback is held back.
func (s *CallbackStore) HeldUntil() time.Time { return time.Time{} }

// ClaimDue claims up to n due callbacks.

func (s *CallbackStore) ClaimDue(ctx context.Context, n int) ([]Job[CallbackWork], error) {
	claims, err := s.w.ClaimDueCallbacks(ctx, n, s.lease)
	if err != nil || len(claims) == 0 {
		return nil, err
	}
	jobs := make([]Job[CallbackWork], len(claims))
	for i, c := range claims {
		jobs[i] = Job[CallbackWork]{ID: c.Callback.MessageID, Token: c.Token, LeaseEnd: c.LeaseEnd, Work: callbackWork(c)}
	}
	return jobs, nil
}

// Complete records a call's outcome.
func (s *CallbackStore) Complete(ctx context.Context, job Job[CallbackWork], outcome lifecycle.Outcome, _ Next) (*Job[CallbackWork], error) {
	if _, err := s.w.CompleteCallback(ctx, job.ID, job.Token, outcome); err != nil {
		return nil, err
	}
	s.metrics.WithLabelValues(string(outcome.Kind)).Inc()
	return nil, nil
}

// Release gives a call's claim back.
func (s *CallbackStore) Release(ctx context.Context, job Job[CallbackWork], started bool, reason string) error {
	if _, err := s.w.ReleaseCallback(ctx, job.ID, job.Token, started, reason); err != nil {
		return err
	}
	s.metrics.WithLabelValues(callbackReleased).Inc()
	return nil
}

const callbackReleased = "released"

// callbackDeliverer makes the calls: a POST of the body, signed with the
// callbacks' keys (targets.SignHeaders), whose answer
// counts as a target's does (targets.HTTPOutcome), under a retry policy of
// its own: exponential from 10 s up to an hour, at most
// callback_max_attempts calls. A sender chose the URL, so each call is
// held to the settings' callbacks as they are when it starts: its host
// against the allowed hosts, and every address it dials, once the name
// is resolved, by the transport's dialer (dial); so a name that resolves
// to a refused address is caught however it resolved at ingest, and so is
// a literal address allowed then but not now.
type callbackDeliverer struct {
	timeout     time.Duration
	now         func() time.Time
	maxAttempts func() int
	// settings are the Writer's, cached as dispatch reads them.
	settings func(context.Context) (lifecycle.Settings, error)
	// keys are the callbacks' signing keys, the Writer's (OwnKeys).
	keys func(context.Context) ([]targets.Key, error)

	// mu guards the policy of the last call and the client made for it,
	// whose transport keeps only connections dialed under that policy.
	mu        sync.Mutex
	last      netguard.Policy
	client    *http.Client
	transport *http.Transport
}

// newCallbackDeliverer makes the deliverer and its client: no proxy, so
// the dialer's check sees the callback's own address, and redirects
// returned as the answer, as for a target: following one would reach an
// address the sender did not name.
func newCallbackDeliverer(cfg CallbackConfig, maxAttempts func() int) *callbackDeliverer {
	d := &callbackDeliverer{timeout: cfg.Timeout, now: cfg.Now, maxAttempts: maxAttempts, settings: cfg.Writer.CachedSettings,
		keys: func(ctx context.Context) ([]targets.Key, error) {
			return cfg.Writer.OwnKeys(ctx, lifecycle.KeyOwnerCallbacks)
		}}
	d.newClient()
	return d
}

// newClient gives the deliverer a client of a transport of its own.
func (d *callbackDeliverer) newClient() {
	d.transport = &http.Transport{DialContext: dial, ForceAttemptHTTP2: true, MaxIdleConns: 100,
		IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second, ExpectContinueTimeout: time.Second}
	// A callback passes no baggage on: its URL is the sender's, who has it.
	d.client = &http.Client{Transport: tracing.Transport(d.transport, false), Timeout: d.timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// policyKey holds, in a call's context, the policy its dials are held to.
type policyKey struct{}

// dial dials under the policy of the call's context: the zero policy,
// which allows no special address, when it has none.
func dial(ctx context.Context, network, address string) (net.Conn, error) {
	policy, _ := ctx.Value(policyKey{}).(netguard.Policy)
	d := net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: policy.Control}
	return d.DialContext(ctx, network, address)
}

// policy is the callbacks' policy in the settings now, with the client to
// call under it. A kept connection was dialed under the policy of its
// time, and a dial is where an address is checked, so a new policy gets a
// client of its own: the old one's idle connections are closed, and those
// in use then are never used again once their calls end.
func (d *callbackDeliverer) policy(ctx context.Context) (netguard.Policy, *http.Client, error) {
	s, err := d.settings(ctx)
	if err != nil {
		return netguard.Policy{}, nil, err
	}
	p := netguard.Policy{Networks: s.Callbacks.Networks(), Hosts: s.Callbacks.AllowedHosts}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !slices.Equal(p.Networks, d.last.Networks) || !slices.Equal(p.Hosts, d.last.Hosts) {
		d.transport.CloseIdleConnections()
		d.newClient()
		d.last = p
	}
	return p, d.client, nil
}

// callbackRetry is the retry policy of the calls, but for the number of
// calls, which is a setting.
var callbackRetry = lifecycle.RetryPolicy{MaxAge: lifecycle.Duration(8760 * time.Hour)}.WithDefaults()

// Deliver makes one call.
func (d *callbackDeliverer) Deliver(ctx context.Context, work CallbackWork) lifecycle.Outcome {
	o := d.call(ctx, work)
	if o.Kind != lifecycle.OutcomeRetry {
		return o
	}
	if max := d.maxAttempts(); work.Attempt >= max {
		return lifecycle.Failed(fmt.Sprintf("%s; gave up after call %d: callback_max_attempts is %d", o.Text, work.Attempt, max))
	}
	now := d.now()
	at, stop := callbackRetry.Next(work.Attempt, work.Since, now, o.RetryAt, rand.Float64()*2-1)
	if stop != "" {
		return lifecycle.Failed(o.Text + "; " + stop)
	}
	return lifecycle.Retry(at, o.Text)
}

func (d *callbackDeliverer) call(ctx context.Context, work CallbackWork) lifecycle.Outcome {
	policy, client, err := d.policy(ctx)
	if err != nil {
		return lifecycle.Outcome{Kind: lifecycle.OutcomeRetry, Text: fmt.Sprintf("read the settings: %v", err)}
	}
	req, err := http.NewRequestWithContext(context.WithValue(ctx, policyKey{}, policy), http.MethodPost, work.URL,
		bytes.NewReader(work.Body))
	if err != nil {
		return lifecycle.Failed(fmt.Sprintf("build request: %v", err))
	}
	if o, refused := refusedCall(policy.AllowsHost(req.URL.Hostname())); refused {
		return o
	}
	keys, err := d.keys(ctx)
	if err != nil {
		return lifecycle.Outcome{Kind: lifecycle.OutcomeRetry, Text: fmt.Sprintf("read the callbacks' signing keys: %v", err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Waybill-Message-Id", work.MessageID.String())
	req.Header.Set("Waybill-Attempt", strconv.Itoa(work.Attempt))
	// The same on every call for one settlement, so a receiver can drop
	// repeats; another settlement's call has another. It is the
	// signature's webhook-id too.
	id := work.MessageID.String() + "/" + strconv.Itoa(work.Seq)
	req.Header.Set("Idempotency-Key", id)
	targets.SignHeaders(req.Header, keys, id, d.now(), work.Body)
	resp, err := client.Do(req)
	if o, refused := refusedCall(err); refused {
		return o
	}
	if err != nil {
		return lifecycle.Outcome{Kind: lifecycle.OutcomeRetry, Text: targets.RequestErrorText(err)}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return targets.HTTPOutcome(resp, body, d.now())
}

// refusedCall is the outcome of a call the settings' callbacks refuse,
// its text naming the setting that would let it through: retried as a
// failed connection is, since a process may call before a change of the
// settings reaches it, and an admin may change them on reading the error.
func refusedCall(err error) (lifecycle.Outcome, bool) {
	var text string
	switch {
	case errors.Is(err, netguard.ErrHost):
		text = fmt.Sprintf("callback refused: %v is not among callbacks.allowed_hosts", err)
	case errors.Is(err, netguard.ErrAddress):
		text = fmt.Sprintf("callback refused: %v, which callbacks reach only in a network callbacks.allowed_networks lists", err)
	default:
		return lifecycle.Outcome{}, false
	}
	return lifecycle.Outcome{Kind: lifecycle.OutcomeRetry, Text: text}, true
}

// CallbackConfig configures the Callbacks.
type CallbackConfig struct {
	// Base's clock decides what is due and reads the leases: give the
	// Callbacks the Writer's Base.
	service.Base
	// Writer is required.
	Writer *commands.Writer
	// Interval is how often the due callbacks are looked for. Default 1 s.
	Interval time.Duration
	// MaxConcurrent bounds the calls in flight. Default 5.
	MaxConcurrent int
	// Timeout bounds one call. Default 30 s.
	Timeout time.Duration
	// DrainGrace is how long Stop lets calls in flight finish. Default 5 s.
	DrainGrace time.Duration
	// Registerer takes waybill_callbacks_total; nil registers it nowhere.
	Registerer prometheus.Registerer
}

// Callbacks makes the messages' outcome callbacks: one Worker over the
// CallbackStore, which looks for the due callbacks every Interval (a
// callback has no wake-up of its own), and reads callback_max_attempts
// from the settings every tenth time.
type Callbacks struct {
	cfg         CallbackConfig
	worker      *Worker[CallbackWork]
	maxAttempts atomic.Int64
	metrics     *prometheus.CounterVec

	stop     context.CancelFunc
	loopDone chan struct{}
	stopOnce sync.Once
}

// NewCallbacks returns the Callbacks; Start sets them going.
func NewCallbacks(cfg CallbackConfig) (*Callbacks, error) {
	if cfg.Writer == nil {
		return nil, errors.New("workers: CallbackConfig.Writer is required")
	}
	cfg.Base = cfg.Base.WithDefaults()
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 5
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = lifecycle.DefaultAttemptTimeout
	}
	c := &Callbacks{cfg: cfg, loopDone: make(chan struct{})}
	c.maxAttempts.Store(lifecycle.DefaultCallbackMaxAttempts)
	c.metrics = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "waybill_callbacks_total",
		Help: "Calls of the messages' outcome callbacks recorded, by outcome (delivered, retry, failed, released).",
	}, []string{"outcome"})
	for _, o := range []lifecycle.OutcomeKind{lifecycle.OutcomeDelivered, lifecycle.OutcomeRetry, lifecycle.OutcomeFailed} {
		c.metrics.WithLabelValues(string(o))
	}
	c.metrics.WithLabelValues(callbackReleased)
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(c.metrics); err != nil {
			return nil, fmt.Errorf("workers: register callback metrics: %w", err)
		}
	}
	w, err := NewWorker(Config[CallbackWork]{
		Name:           "callbacks",
		Store:          &CallbackStore{w: cfg.Writer, lease: 2*cfg.Timeout + time.Minute, metrics: c.metrics},
		Deliverer:      traced(cfg.Tracer, newCallbackDeliverer(cfg, func() int { return int(c.maxAttempts.Load()) }), callbackSpan),
		MaxConcurrent:  cfg.MaxConcurrent,
		AttemptTimeout: cfg.Timeout,
		DrainGrace:     cfg.DrainGrace,
		Base:           cfg.Base,
	})
	if err != nil {
		return nil, err
	}
	c.worker = w
	return c, nil
}

// Start reads the settings, makes the callbacks' signing key if they
// sign and have none yet, and starts the worker, whose first act is to
// take what is due; then it looks again every Interval. ctx bounds the
// start only.
func (c *Callbacks) Start(ctx context.Context) error {
	if err := c.readSettings(ctx); err != nil {
		return err
	}
	if _, err := c.cfg.Writer.OwnKeys(ctx, lifecycle.KeyOwnerCallbacks); err != nil {
		return fmt.Errorf("callbacks: %w", err)
	}
	if err := c.worker.Start(ctx); err != nil {
		return err
	}
	loop, stop := context.WithCancel(context.Background())
	c.stop = stop
	go func() {
		defer close(c.loopDone)
		t := time.NewTicker(c.cfg.Interval)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-loop.Done():
				return
			case <-t.C:
			}
			if n%10 == 0 {
				if err := c.readSettings(loop); err != nil && loop.Err() == nil {
					c.cfg.Logger.Warn("callbacks: read the settings", "err", err)
				}
			}
			c.worker.Poke()
		}
	}()
	return nil
}

func (c *Callbacks) readSettings(ctx context.Context) error {
	s, err := c.cfg.Writer.Settings(ctx)
	if err != nil {
		return fmt.Errorf("callbacks: %w", err)
	}
	c.maxAttempts.Store(int64(s.WithDefaults().CallbackMaxAttempts))
	return nil
}

// Stop stops looking, lets the calls in flight finish as Worker.Stop
// does, and waits within ctx. Safe to call twice, and without Start.
func (c *Callbacks) Stop(ctx context.Context) {
	c.stopOnce.Do(func() {
		if c.stop != nil {
			c.stop()
			<-c.loopDone
		}
		c.worker.Stop(ctx)
		if c.cfg.Registerer != nil {
			c.cfg.Registerer.Unregister(c.metrics)
		}
	})
}
