package feed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/service"
)

// Handler handles the events of one committed transaction, in feed order;
// a transaction of more events than a read takes comes in several calls.
// An error leaves them unacked: they are all delivered again, and the group
// does not move past them until the handler succeeds. The same events may
// also come again after a crash, so a handler must be idempotent.
type Handler func(ctx context.Context, events []journal.Event) error

// Config configures a Consumer.
type Config struct {
	// DB is the database, on which schema.Ensure has run; required.
	DB *pgxpool.Pool
	// Group names the consumer group, whose place in the journal is kept
	// under this name; required, a name as lifecycle.CheckName accepts.
	Group string
	// Handle is called for each transaction's events, in feed order;
	// required.
	Handle Handler
	// PollInterval is the wait after a read that found nothing, and before
	// an event its handler failed is delivered again. Default 1 s.
	PollInterval time.Duration
	// Metrics, when not nil, gets the group's lag gauges while the consumer
	// runs.
	Metrics prometheus.Registerer
	// Base's clock measures the lag's age.
	service.Base
}

// Consumer feeds the journal's events to a handler, for one group.
type Consumer struct {
	db      *pgxpool.Pool
	group   string
	handle  Handler
	poll    time.Duration
	metrics prometheus.Registerer
	now     func() time.Time
	log     *slog.Logger

	mu      sync.Mutex
	started bool
	sub     *wsql.Subscriber
	cancel  context.CancelFunc
	lag     prometheus.Collector
	stop    sync.Once
	done    chan struct{}

	// polled, set by tests, is called after every read of the journal.
	polled func()
}

// NewConsumer checks cfg and returns a Consumer; Start runs it.
func NewConsumer(cfg Config) (*Consumer, error) {
	var errs []error
	if cfg.DB == nil {
		errs = append(errs, errors.New("Config.DB is required"))
	}
	if cfg.Handle == nil {
		errs = append(errs, errors.New("Config.Handle is required"))
	}
	errs = append(errs, lifecycle.CheckName("group", cfg.Group))
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("feed: %w", err)
	}
	base := cfg.Base.WithDefaults()
	c := &Consumer{db: cfg.DB, group: cfg.Group, handle: cfg.Handle, poll: cfg.PollInterval,
		metrics: cfg.Metrics, now: base.Now, log: base.Logger, done: make(chan struct{})}
	if c.poll <= 0 {
		c.poll = time.Second
	}
	c.log = c.log.With("group", c.group)
	return c, nil
}

// Start creates the group's place at the journal's start when it has none,
// registers the lag gauges, and feeds the events to the handler until Stop is
// called; ctx bounds the start only. A Consumer starts once.
func (c *Consumer) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return fmt.Errorf("feed: group %s: the consumer was started already", c.group)
	}
	c.started = true
	cfg := wsql.SubscriberConfig{
		ConsumerGroup:    c.group,
		PollInterval:     c.poll,
		ResendInterval:   c.poll,
		RetryInterval:    c.poll,
		SchemaAdapter:    journalSchema{},
		OffsetsAdapter:   offsets,
		InitializeSchema: true,
	}
	if c.polled != nil {
		cfg.BackoffManager = polledBackoff{wsql.NewDefaultBackoffManager(c.poll, c.poll), c.polled}
	}
	// Watermill's info is chatter at our level: its starts and stops.
	logger := watermill.NewSlogLoggerWithLevelMapping(c.log, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug})
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(walkingPool{c.db}), cfg, logger)
	if err != nil {
		return fmt.Errorf("feed: group %s: %w", c.group, err)
	}
	// The feed runs until Stop, which saves its place: a caller's context
	// ending must not cut it off first.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	msgs, err := sub.Subscribe(runCtx, topic)
	if err != nil {
		cancel()
		return errors.Join(fmt.Errorf("feed: subscribe group %s: %w", c.group, err), sub.Close())
	}
	if c.metrics != nil {
		lag := newLag(c.db, c.group, c.now)
		if err := c.metrics.Register(lag); err != nil {
			cancel()
			return errors.Join(fmt.Errorf("feed: register lag of group %s: %w", c.group, err), sub.Close())
		}
		c.lag = lag
	}
	c.sub, c.cancel = sub, cancel
	go c.run(msgs)
	c.log.Info("feed consumer started")
	return nil
}

// run hands the events of each message, a transaction's, to the handler
// and acks or nacks the message.
func (c *Consumer) run(msgs <-chan *message.Message) {
	defer func() {
		c.log.Info("feed consumer stopped")
		close(c.done)
	}()
	for msg := range msgs {
		// The message's context carries the subscriber's ack deadline.
		ctx := msg.Context()
		events, err := decodeEvents(msg.Payload)
		if err == nil {
			err = c.handleSafely(ctx, events)
		}
		if err != nil {
			if ctx.Err() == nil {
				c.log.Error("feed transaction not handled; it will be delivered again", "last_position", msg.UUID, "err", err)
			}
			msg.Nack()
			continue
		}
		msg.Ack()
	}
}

// handleSafely hands a transaction's events to the handler. A panic in it,
// a bug, is that transaction's error, logged with its stack: the
// transaction is delivered again, as after any error, and the process
// goes on.
func (c *Consumer) handleSafely(ctx context.Context, events []journal.Event) (err error) {
	defer service.Recovered(c.log, "feed handler", &err)
	return c.handle(ctx, events)
}

// Stop ends the feed and waits, within ctx, for the handler to return. The
// events acked until then keep their place; an event being handled is
// delivered again at the next start. Safe to call twice, and before Start.
func (c *Consumer) Stop(ctx context.Context) {
	c.mu.Lock()
	sub := c.sub
	c.mu.Unlock()
	if sub == nil {
		return
	}
	c.stop.Do(func() {
		if c.lag != nil {
			c.metrics.Unregister(c.lag)
		}
		go func() {
			// Closing first lets the subscriber commit the place of the
			// events acked in its current read; then the handler's context
			// ends.
			if err := sub.Close(); err != nil {
				c.log.Error("close feed subscriber", "err", err)
			}
			c.cancel()
		}()
	})
	select {
	case <-c.done:
	case <-ctx.Done():
		// Interrupts a query or a handler that holds the stop up.
		c.cancel()
		c.log.Warn("feed consumer still stopping", "err", ctx.Err())
	}
}

// polledBackoff calls a test's hook after each read: the subscriber asks its
// back-off manager for the next wait after every one.
type polledBackoff struct {
	wsql.BackoffManager
	polled func()
}

func (b polledBackoff) HandleError(logger watermill.LoggerAdapter, noMsg bool, err error) time.Duration {
	b.polled()
	return b.BackoffManager.HandleError(logger, noMsg, err)
}
