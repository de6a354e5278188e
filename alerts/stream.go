package alerts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/feed"
	"github.com/waybill/waybill/internal/plainjson"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/redact"
	"github.com/waybill/waybill/service"
)

// StreamGroup is the event stream's consumer group in the feed.
const StreamGroup = "events"

// StreamConfig configures an EventStream.
type StreamConfig struct {
	// DB is the database, on which schema.Ensure has run; required.
	DB *pgxpool.Pool
	// NATS publishes the events; required.
	NATS *nats.Conn
	// PollInterval is the feed's; see feed.Config.
	PollInterval time.Duration
	// Metrics, when not nil, gets the stream's feed lag while it runs.
	Metrics prometheus.Registerer
	// Base's clock measures the feed's lag.
	service.Base
}

// EventStream publishes every journal event on NATS, for consumers outside
// Waybill, in feed order, on waybill.events.<kind>, with the position as
// Nats-Msg-Id; the secrets of target and source definitions are masked
// (redact.Payload), as for a reader of GET /journal. An event is published again after a crash before
// its ack. An event too big for the connection's max payload goes without
// its payload, rather than hold back every event after it.
type EventStream struct {
	nc       *nats.Conn
	log      *slog.Logger
	consumer *feed.Consumer
}

// NewEventStream checks cfg and returns an EventStream; Start runs it.
func NewEventStream(cfg StreamConfig) (*EventStream, error) {
	if cfg.DB == nil || cfg.NATS == nil {
		return nil, errors.New("alerts: StreamConfig.DB and StreamConfig.NATS are required")
	}
	base := cfg.Base.WithDefaults()
	s := &EventStream{nc: cfg.NATS, log: base.Logger.With("component", "event_stream")}
	var err error
	s.consumer, err = feed.NewConsumer(feed.Config{DB: cfg.DB, Group: StreamGroup, Handle: s.handle,
		PollInterval: cfg.PollInterval, Metrics: cfg.Metrics, Base: base})
	if err != nil {
		return nil, fmt.Errorf("alerts: event stream: %w", err)
	}
	return s, nil
}

// Start publishes from the group's place on until Stop; ctx bounds the
// start only.
func (s *EventStream) Start(ctx context.Context) error { return s.consumer.Start(ctx) }

// Stop stops publishing and waits within ctx; safe to call twice.
func (s *EventStream) Stop(ctx context.Context) { s.consumer.Stop(ctx) }

// eventJSON is an event as the stream publishes it: the journal columns and
// the payload as the journal stores it, or, for an event too big to
// publish whole, the payload's size in its stead.
type eventJSON struct {
	Position   int64                   `json:"position"`
	RecordedAt time.Time               `json:"recorded_at"`
	Stream     string                  `json:"stream"`
	Version    int                     `json:"version"`
	Kind       journal.Kind            `json:"kind"`
	Actor      string                  `json:"actor"`
	DeliveryID uuid.UUID               `json:"delivery_id,omitzero"`
	Target     string                  `json:"target,omitempty"`
	OldState   lifecycle.DeliveryState `json:"old_state,omitempty"`
	NewState   lifecycle.DeliveryState `json:"new_state,omitempty"`
	Payload    journal.Payload         `json:"payload,omitempty"`
	// PayloadOmittedBytes is the size of the payload left out.
	PayloadOmittedBytes int `json:"payload_omitted_bytes,omitempty"`
}

// handle publishes a transaction's events and then waits once for the
// server to have them all.
func (s *EventStream) handle(ctx context.Context, events []journal.Event) error {
	for _, e := range events {
		id := strconv.FormatInt(e.Position, 10)
		ev := eventJSON{Position: e.Position, RecordedAt: e.RecordedAt, Stream: e.Stream,
			Version: e.Version, Kind: e.Kind(), Actor: e.Actor, DeliveryID: e.DeliveryID, Target: e.Target,
			OldState: e.OldState, NewState: e.NewState, Payload: redact.Payload(e.Payload)}
		data, err := plainjson.Marshal(ev)
		if err != nil {
			return fmt.Errorf("event stream: encode position %d: %w", e.Position, err)
		}
		if len(data) > room(s.nc, id) {
			if data, err = s.withoutPayload(ev, len(data)); err != nil {
				return err
			}
		}
		if err := publish(s.nc, "waybill.events."+string(e.Kind()), id, data); err != nil {
			return err
		}
	}
	return flush(ctx, s.nc)
}

// withoutPayload is ev, whose encoding has size bytes, with its payload
// left out and sized: the server would refuse it whole, and the feed would
// hand its transaction back for ever. The envelope alone is a few hundred
// bytes, far below the least max payload serve accepts.
func (s *EventStream) withoutPayload(ev eventJSON, size int) ([]byte, error) {
	payload, err := plainjson.Marshal(ev.Payload)
	if err != nil {
		return nil, fmt.Errorf("event stream: encode position %d: %w", ev.Position, err)
	}
	ev.Payload, ev.PayloadOmittedBytes = nil, len(payload)
	data, err := plainjson.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("event stream: encode position %d: %w", ev.Position, err)
	}
	s.log.Warn("event too big for NATS, published without its payload", "position", ev.Position, "kind", ev.Kind,
		"bytes", size, "max_payload", s.nc.MaxPayload())
	return data, nil
}
